/// A response as the bytes that go on the wire.
enum ResponseBytes {
    /// What the connection says about itself in the response.
    enum Persistence {
        /// HTTP/1.1 keep-alive: nothing to say.
        case keepAlive
        /// An HTTP/1.0 client asked to keep the connection: `connection: keep-alive`.
        case keepAliveHTTP10
        /// The connection closes after this response: `connection: close`.
        case close
    }

    /// Status line, headers and (unless `headOnly`) the body. A 1xx, 204 or 304 goes without
    /// `content-length` and without a body, as HTTP requires; header values lose any CR or
    /// LF (a response can never be split).
    static func of(_ response: HTTPResponse, headOnly: Bool, persistence: Persistence, extraHeaders: [(String, String)] = []) -> [UInt8] {
        let (head, body) = parts(response, headOnly: headOnly, persistence: persistence, extraHeaders: extraHeaders)
        return body.isEmpty ? head : head + body
    }

    /// The same, as the head and the body that follows it (the response's own storage, not a
    /// copy; empty when none is sent).
    /// `streamed`: the body follows as it is made, until the connection closes (no
    /// `content-length`).
    static func parts(_ response: HTTPResponse, headOnly: Bool, persistence: Persistence,
                      extraHeaders: [(String, String)] = [], streamed: Bool = false) -> (head: [UInt8], body: [UInt8]) {
        let bodiless = response.status == 204 || response.status == 304 || (100..<200).contains(response.status)
        var head = "HTTP/1.1 \(response.status) \(reasonPhrase(response.status))\r\n"
        if !bodiless {
            head += "content-type: \(clean(response.contentType))\r\n"
            if !streamed { head += "content-length: \(response.body.count)\r\n" }
        }
        for (name, value) in response.headers + extraHeaders {
            head += "\(clean(name).lowercased()): \(clean(value))\r\n"
        }
        switch persistence {
        case .keepAlive: break
        case .keepAliveHTTP10: head += "connection: keep-alive\r\n"
        case .close: head += "connection: close\r\n"
        }
        head += "\r\n"
        return (Array(head.utf8), bodiless || headOnly ? [] : response.body)
    }

    /// The interim answer to `expect: 100-continue`.
    static let `continue` = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)

    private static func clean(_ text: String) -> String {
        text.contains(where: { $0 == "\r" || $0 == "\n" }) ? text.filter { $0 != "\r" && $0 != "\n" } : text
    }

    static func reasonPhrase(_ status: Int) -> String {
        switch status {
        case 100: return "Continue"
        case 101: return "Switching Protocols"
        case 200: return "OK"
        case 201: return "Created"
        case 204: return "No Content"
        case 301: return "Moved Permanently"
        case 304: return "Not Modified"
        case 400: return "Bad Request"
        case 401: return "Unauthorized"
        case 403: return "Forbidden"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 408: return "Request Timeout"
        case 409: return "Conflict"
        case 411: return "Length Required"
        case 413: return "Content Too Large"
        case 414: return "URI Too Long"
        case 421: return "Misdirected Request"
        case 426: return "Upgrade Required"
        case 429: return "Too Many Requests"
        case 431: return "Request Header Fields Too Large"
        case 500: return "Internal Server Error"
        case 501: return "Not Implemented"
        case 503: return "Service Unavailable"
        case 505: return "HTTP Version Not Supported"
        default: return "Status \(status)"
        }
    }
}
