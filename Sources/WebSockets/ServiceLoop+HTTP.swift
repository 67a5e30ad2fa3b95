import CWebSockets

/// The HTTP side of the service thread: upgrade decisions, dynamic paths, reading requests.
extension ServiceLoop {
    /// LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: 0 lets the upgrade proceed, 1 means "answered".
    func confirmUpgrade(_ wsi: OpaquePointer, to upgrade: String?) -> Int32 {
        guard upgrade?.lowercased() == "websocket" else {
            return reject(wsi, status: 400)
        }
        let path = Self.header(wsi, WSI_TOKEN_GET_URI) ?? ""
        guard path == configuration.webSocketPath else { return reject(wsi, status: 404) }
        if let offered = Self.header(wsi, WSI_TOKEN_PROTOCOL), !Self.offers(offered, configuration.subprotocol) {
            // lws would hang up without an answer; say why instead.
            return reject(wsi, status: 400, message: "unsupported subprotocol; use \(configuration.subprotocol)")
        }
        guard table.withLock({ $0.phase == .running }) else { return reject(wsi, status: 503) }
        let request = upgradeRequest(wsi)
        switch handler.shouldAccept(request) {
        case .accept:
            lastUpgrade = (wsi, request)
            return 0
        case let .reject(status):
            return reject(wsi, status: status)
        }
    }

    private func reject(_ wsi: OpaquePointer, status: Int, message: String? = nil) -> Int32 {
        let text = "\(status) \(message ?? Self.reasonPhrase(status))\n"
        // lws completes the transaction itself when we return 1.
        // lws has not parsed the HTTP version of an upgrade request yet (it would answer
        // HTTP/1.0), so the status line is written here.
        return Self.respond(wsi, HTTPResponse(status: status, text: text), upgradeRejection: true) ? 1 : -1
    }

    /// LWS_CALLBACK_HTTP: a request no file mount took (dynamic paths, missing files, anything
    /// without a web root). GET and HEAD; other methods answer 405.
    func answerHTTP(_ wsi: OpaquePointer) -> Int32 {
        let response: HTTPResponse
        let head = Self.header(wsi, WSI_TOKEN_HEAD_URI)
        if let path = Self.header(wsi, WSI_TOKEN_GET_URI) ?? head {
            if dynamicPaths.contains(path) {
                let request = HTTPRequest(
                    path: path, query: Self.query(wsi),
                    authorization: Self.header(wsi, WSI_TOKEN_HTTP_AUTHORIZATION))
                response = handler.httpRequest(request) ?? Self.notFound
            } else {
                response = Self.notFound
            }
        } else {
            response = HTTPResponse(status: 405, text: "405 Method Not Allowed\n", headers: [("allow", "GET, HEAD")])
        }
        guard Self.respond(wsi, response, headOnly: head != nil) else { return -1 }
        return lws_http_transaction_completed(wsi) != 0 ? -1 : 0
    }

    static let notFound = HTTPResponse(status: 404, text: "404 Not Found\n")

    func upgradeRequest(_ wsi: OpaquePointer) -> UpgradeRequest {
        let offered = Self.header(wsi, WSI_TOKEN_PROTOCOL)
        return UpgradeRequest(
            path: Self.header(wsi, WSI_TOKEN_GET_URI) ?? "",
            query: Self.query(wsi),
            origin: Self.header(wsi, WSI_TOKEN_ORIGIN),
            host: Self.header(wsi, WSI_TOKEN_HOST),
            authorization: Self.header(wsi, WSI_TOKEN_HTTP_AUTHORIZATION),
            subprotocol: offered.flatMap { Self.offers($0, configuration.subprotocol) ? configuration.subprotocol : nil },
            peer: Self.peer(wsi))
    }

    // MARK: Reading a request

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

    /// Writes status line, headers and body in one go (lws buffers what the socket does not take).
    static func respond(
        _ wsi: OpaquePointer, _ response: HTTPResponse, upgradeRejection: Bool = false, headOnly: Bool = false
    ) -> Bool {
        let pre = tabd_lws_pre()
        var headerRoom = 2048 + response.contentType.utf8.count
        for (name, value) in response.headers { headerRoom += name.utf8.count + value.utf8.count + 8 }
        let capacity = pre + headerRoom + response.body.count
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
        guard add(WSI_TOKEN_HTTP_CONTENT_TYPE, response.contentType),
            add(WSI_TOKEN_HTTP_CONTENT_LENGTH, String(response.body.count))
        else { return false }
        for (name, value) in response.headers {
            var nameBytes = Array((name.lowercased() + ":").utf8) + [0]
            var valueBytes = Array(value.utf8)
            guard lws_add_http_header_by_name(wsi, &nameBytes, &valueBytes, Int32(valueBytes.count), &p, end) == 0
            else { return false }
        }
        guard lws_finalize_http_header(wsi, &p, end) == 0, var cursor = p else { return false }
        response.body.withUnsafeBytes { body in
            if !headOnly, let base = body.baseAddress {
                UnsafeMutableRawPointer(cursor).copyMemory(from: base, byteCount: body.count)
            }
        }
        if !headOnly { cursor += response.body.count }
        let total = cursor - start
        return tabd_lws_write_raw(wsi, start, total) == total
    }

    static func reasonPhrase(_ status: Int) -> String {
        switch status {
        case 400: return "Bad Request"
        case 401: return "Unauthorized"
        case 403: return "Forbidden"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 429: return "Too Many Requests"
        case 500: return "Internal Server Error"
        case 503: return "Service Unavailable"
        default: return "Error"
        }
    }
}
