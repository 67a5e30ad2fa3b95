import CWebSockets

/// Reading an HTTP request's head from lws, and writing a response: no state, service thread.
extension ServiceLoop {
    // MARK: Reading a request

    /// How a request's body is delimited, as far as lws can follow it.
    enum BodyFraming: Equatable {
        /// `content-length` bytes (0 without a body).
        case length(Int)
        /// `transfer-encoding` (chunked): lws cannot read it; it would take the chunk framing
        /// (or the next requests) for the body.
        case chunked
        /// A POST, PUT or PATCH without `content-length`: lws then expects a 100 MB body.
        case missingLength
        /// A `content-length` that is not a number.
        case invalid
    }

    /// The method and path (without the query); a nil method is one lws knows but we do not
    /// serve (CONNECT); lws refuses unknown methods itself.
    static func requestLine(_ wsi: OpaquePointer) -> (method: HTTPMethod?, path: String?) {
        let methods: [(HTTPMethod, lws_token_indexes)] = [
            (.get, WSI_TOKEN_GET_URI), (.post, WSI_TOKEN_POST_URI), (.put, WSI_TOKEN_PUT_URI),
            (.delete, WSI_TOKEN_DELETE_URI), (.head, WSI_TOKEN_HEAD_URI), (.patch, WSI_TOKEN_PATCH_URI),
            (.options, WSI_TOKEN_OPTIONS_URI),
        ]
        for (method, token) in methods {
            if let path = header(wsi, token) { return (method, path) }
        }
        return (nil, header(wsi, WSI_TOKEN_CONNECT))
    }

    static func bodyFraming(_ wsi: OpaquePointer, _ method: HTTPMethod?) -> BodyFraming {
        if header(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING) != nil { return .chunked }
        if let text = header(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH) {
            guard !text.isEmpty, text.utf8.count <= 18, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }),
                let length = Int(text)
            else { return .invalid }
            return .length(length)
        }
        switch method {
        case .post, .put, .patch: return .missingLength
        default: return .length(0)
        }
    }

    static func expectsContinue(_ wsi: OpaquePointer) -> Bool {
        header(wsi, WSI_TOKEN_HTTP_EXPECT)?.lowercased() == "100-continue"
    }

    static func offers(_ header: String, _ subprotocol: String) -> Bool {
        header.split(separator: ",").contains { token in
            token.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed()
                .elementsEqual(subprotocol)
        }
    }

    /// A request header (all its fragments), nil when absent.
    static func header(_ wsi: OpaquePointer, _ token: lws_token_indexes) -> String? {
        let length = Int(lws_hdr_total_length(wsi, token))
        guard length > 0 else { return nil }
        var buffer = [CChar](repeating: 0, count: length + 1)
        let copied = Int(lws_hdr_copy(wsi, &buffer, Int32(buffer.count), token))
        guard copied >= 0 else { return nil }
        return buffer.withUnsafeBufferPointer { pointer in
            String(decoding: UnsafeRawBufferPointer(start: pointer.baseAddress, count: copied), as: UTF8.self)
        }
    }

    /// The query parameters; lws splits them at `&` and has already percent-decoded them.
    static func query(_ wsi: OpaquePointer) -> [String: String] {
        let total = Int(lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_URI_ARGS))
        guard total > 0 else { return [:] }
        var result: [String: String] = [:]
        var buffer = [CChar](repeating: 0, count: total + 1)
        for index in 0..<256 {
            let copied = Int(lws_hdr_copy_fragment(wsi, &buffer, Int32(buffer.count), WSI_TOKEN_HTTP_URI_ARGS, Int32(index)))
            guard copied >= 0 else { break }
            let fragment = buffer.withUnsafeBufferPointer { pointer in
                String(decoding: UnsafeRawBufferPointer(start: pointer.baseAddress, count: copied), as: UTF8.self)
            }
            guard !fragment.isEmpty else { continue }
            if let equals = fragment.firstIndex(of: "=") {
                result[String(fragment[..<equals])] = String(fragment[fragment.index(after: equals)...])
            } else {
                result[fragment] = ""
            }
        }
        return result
    }

    static func peer(_ wsi: OpaquePointer) -> String {
        var buffer = [CChar](repeating: 0, count: 64)
        guard lws_get_peer_simple(wsi, &buffer, buffer.count) != nil else { return "" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    // MARK: Writing a response

    /// Tells a client that sent `expect: 100-continue` to send its body (lws does not).
    static func writeContinue(_ wsi: OpaquePointer) -> Bool {
        let line = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)
        return tabd_lws_write_raw(wsi, line, line.count) == line.count
    }

    /// Writes status line, headers and body in one go (lws buffers what the socket does not take).
    /// A 204 (or 1xx, 304) goes without `content-length` and without a body, as HTTP requires.
    static func respond(
        _ wsi: OpaquePointer, _ response: HTTPResponse, upgradeRejection: Bool = false, headOnly: Bool = false
    ) -> Bool {
        let bodiless = response.status == 204 || response.status == 304 || (100..<200).contains(response.status)
        let body = headOnly || bodiless ? [] : response.body
        let pre = tabd_lws_pre()
        var headerRoom = 2048 + response.contentType.utf8.count
        for (name, value) in response.headers { headerRoom += name.utf8.count + value.utf8.count + 8 }
        let capacity = pre + headerRoom + body.count
        let buffer = UnsafeMutablePointer<UInt8>.allocate(capacity: capacity)
        defer { buffer.deallocate() }
        let start = buffer + pre
        let end = start + headerRoom
        var p: UnsafeMutablePointer<UInt8>? = start

        if upgradeRejection {
            let line = Array("HTTP/1.1 \(response.status) \(reasonPhrase(response.status))\r\n".utf8)
            UnsafeMutableRawPointer(start).copyMemory(from: line, byteCount: line.count)
            p = start + line.count
        } else {
            guard lws_add_http_header_status(wsi, UInt32(clamping: response.status), &p, end) == 0 else { return false }
        }
        func add(_ token: lws_token_indexes, _ value: String) -> Bool {
            var bytes = Array(value.utf8)
            return lws_add_http_header_by_token(wsi, token, &bytes, Int32(bytes.count), &p, end) == 0
        }
        if !bodiless {
            guard add(WSI_TOKEN_HTTP_CONTENT_TYPE, response.contentType),
                add(WSI_TOKEN_HTTP_CONTENT_LENGTH, String(response.body.count))
            else { return false }
        }
        for (name, value) in response.headers {
            var nameBytes = Array((name.lowercased() + ":").utf8) + [0]
            var valueBytes = Array(value.utf8)
            guard lws_add_http_header_by_name(wsi, &nameBytes, &valueBytes, Int32(valueBytes.count), &p, end) == 0
            else { return false }
        }
        guard lws_finalize_http_header(wsi, &p, end) == 0, var cursor = p else { return false }
        body.withUnsafeBytes { bytes in
            if let base = bytes.baseAddress {
                UnsafeMutableRawPointer(cursor).copyMemory(from: base, byteCount: bytes.count)
            }
        }
        cursor += body.count
        let total = cursor - start
        return tabd_lws_write_raw(wsi, start, total) == total
    }

    static func reasonPhrase(_ status: Int) -> String {
        switch status {
        case 200: return "OK"
        case 201: return "Created"
        case 204: return "No Content"
        case 400: return "Bad Request"
        case 401: return "Unauthorized"
        case 403: return "Forbidden"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 409: return "Conflict"
        case 411: return "Length Required"
        case 413: return "Payload Too Large"
        case 429: return "Too Many Requests"
        case 500: return "Internal Server Error"
        case 503: return "Service Unavailable"
        default: return "Error"
        }
    }
}
