import Foundation

/// The files of a web root, answered to GET and HEAD: `/` and every path ending in `/` serve
/// its `index.html`. Only regular files inside the root are served: paths with a segment
/// starting with `.` (hidden files, and `..` that got this far) and files whose real path
/// leaves the root (a symbolic link out of it) answer 404, as do missing files.
struct StaticFiles: Sendable {
    /// The root's real path, with a trailing `/`.
    let root: String
    let securityHeaders: [(String, String)]
    /// The origins whose pages may import the root's modules (`Configuration.moduleOrigins`).
    let moduleOrigins: Set<String>
    static let maxFileBytes = 64 << 20

    init(root: String, strictSecurityHeaders: Bool, moduleOrigins: [String] = [], securityPolicy: String? = nil) {
        self.moduleOrigins = Set(moduleOrigins)
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
        if let securityPolicy {
            // One header: its directives joined to the strict policy's, if there is one (a
            // directive named twice counts once, the first, so the strict one's stay).
            if let i = headers.firstIndex(where: { $0.0 == "content-security-policy" }) {
                let have = Set(headers[i].1.split(separator: ";").compactMap { $0.split(separator: " ").first.map(String.init) })
                let added = securityPolicy.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
                    .filter { !$0.isEmpty && !have.contains(String($0.split(separator: " ")[0])) }
                if !added.isEmpty { headers[i].1 += " " + added.joined(separator: "; ") + ";" }
            } else {
                headers.append(("content-security-policy", securityPolicy))
            }
        }
        securityHeaders = headers
    }

    /// Whether a path names a JavaScript module, which pages of other origins may import.
    static func isModule(_ path: String) -> Bool {
        path.hasSuffix(".js") || path.hasSuffix(".mjs")
    }

    /// The CORS headers of a module's answer for a request from `origin`: the origin itself
    /// when it is one of `moduleOrigins` (never `*`), and `vary: origin` either way, so that
    /// no cache hands one origin's answer to another.
    func corsHeaders(path: String, origin: String?) -> [(String, String)] {
        guard Self.isModule(path) else { return [] }
        guard let origin, moduleOrigins.contains(origin) else { return [("vary", "origin")] }
        return [("access-control-allow-origin", origin), ("vary", "origin")]
    }

    /// The answer to an `OPTIONS` preflight for a module: 204 with the methods a module
    /// import may use, for an allowed origin; 403 for any other request.
    func preflight(path: String, origin: String?) -> HTTPResponse {
        let cors = corsHeaders(path: path, origin: origin)
        guard cors.contains(where: { $0.0 == "access-control-allow-origin" }) else {
            return HTTPResponse(status: 403, text: "403 Forbidden (not a module this origin may load)\n", headers: [("vary", "origin")])
        }
        return HTTPResponse(
            status: 204, contentType: "text/plain; charset=utf-8", body: [],
            headers: cors + [("access-control-allow-methods", "GET, HEAD"), ("access-control-max-age", "600")])
    }

    /// The answer for a decoded, normalized path (see `RequestTarget`), with the CORS
    /// headers a module gets for a request from `origin`.
    func response(for path: String, origin: String?) -> HTTPResponse {
        var answer = response(for: path)
        if answer.status == 200 { answer.headers += corsHeaders(path: path, origin: origin) }
        return answer
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
