import Foundation

/// The files of a web root, answered to GET and HEAD: `/` and every path ending in `/` serve
/// its `index.html`. Only regular files inside the root are served: paths with a segment
/// starting with `.` (hidden files, and `..` that got this far) and files whose real path
/// leaves the root (a symbolic link out of it) answer 404, as do missing files.
struct StaticFiles: Sendable {
    /// The root's real path, with a trailing `/`.
    let root: String
    let securityHeaders: [(String, String)]
    static let maxFileBytes = 64 << 20

    init(root: String, strictSecurityHeaders: Bool) {
        let path = Self.realPath(root) ?? root
        self.root = path.hasSuffix("/") ? path : path + "/"
        var headers = [("x-content-type-options", "nosniff"), ("cache-control", "no-cache")]
        if strictSecurityHeaders {
            // libwebsockets' set of "security best practices" headers, which tabd's page meets.
            headers += [
                ("content-security-policy",
                 "default-src 'none'; img-src 'self' data: ; script-src 'self'; font-src 'self'; style-src 'self'; "
                    + "connect-src 'self' ws: wss:; frame-ancestors 'none'; base-uri 'none'; form-action 'self';"),
                ("x-xss-protection", "1; mode=block"), ("x-frame-options", "deny"), ("referrer-policy", "no-referrer"),
            ]
        }
        securityHeaders = headers
    }

    /// The answer for a decoded, normalized path (see `RequestTarget`).
    func response(for path: String) -> HTTPResponse {
        var relative = String(path.dropFirst())
        if relative.isEmpty || relative.hasSuffix("/") { relative += "index.html" }
        guard !relative.split(separator: "/").contains(where: { $0.hasPrefix(".") }) else { return Self.notFound }
        guard let real = Self.realPath(root + relative), real.hasPrefix(root) else { return Self.notFound }
        let fd = open(real, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { return Self.notFound }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return Self.notFound }
        guard info.st_size <= Self.maxFileBytes else {
            return HTTPResponse(status: 500, text: "500 Internal Server Error (file too large to serve)\n")
        }
        var body = [UInt8](repeating: 0, count: Int(info.st_size))
        var offset = 0
        while offset < body.count {
            let n = body.withUnsafeMutableBytes { read(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            offset += n
        }
        body.removeSubrange(offset...)
        return HTTPResponse(status: 200, contentType: Self.contentType(of: real), body: body, headers: securityHeaders)
    }

    /// The path with every symbolic link, `.` and `..` resolved; nil when it does not exist.
    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    static let notFound = HTTPResponse(status: 404, text: "404 Not Found\n")

    static func contentType(of path: String) -> String {
        let ext = path.split(separator: ".").last.map { $0.lowercased() } ?? ""
        switch ext {
        case "html", "htm": return "text/html; charset=utf-8"
        case "js", "mjs": return "text/javascript; charset=utf-8"
        case "css": return "text/css; charset=utf-8"
        case "json", "map": return "application/json"
        case "svg": return "image/svg+xml"
        case "png": return "image/png"
        case "jpg", "jpeg": return "image/jpeg"
        case "gif": return "image/gif"
        case "ico": return "image/x-icon"
        case "webp": return "image/webp"
        case "woff2": return "font/woff2"
        case "woff": return "font/woff"
        case "txt", "md": return "text/plain; charset=utf-8"
        case "webmanifest": return "application/manifest+json"
        case "wasm": return "application/wasm"
        case "ts": return "text/plain; charset=utf-8"
        default: return "application/octet-stream"
        }
    }
}
