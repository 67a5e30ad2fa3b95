import CWebContent
import FoundationEssentials
import Glibc
import Dispatch
import Locking
import Portable

/// The files of a web root, answered to GET and HEAD: `/` and every path ending in `/` serve
/// its `index.html`. Only regular files inside the root are served: paths with a segment
/// starting with `.` (hidden files, and `..` that got this far) and files whose real path
/// leaves the root (a symbolic link out of it) answer 404, as do missing files.
///
/// They are served as a CDN would: each answer carries a strong validator (`etag`, from the
/// SHA-256 of the content), a request whose `if-none-match` names it is answered 304 without
/// a body, text is gzipped for a client that accepts it (`vary: accept-encoding`), and a URL
/// whose `v` parameter is the content's hash (``Variants/hash``) may be kept for a year
/// (`immutable`): the URL changes when the file does. Any other URL is `no-cache`: kept,
/// but checked (a 304 costs no body).
struct StaticFiles: Sendable {
    /// The root's real path, with a trailing `/`.
    let root: String
    let securityHeaders: [(String, String)]
    /// The origins whose pages may import the root's modules (`Configuration.moduleOrigins`).
    let moduleOrigins: Set<String>
    static let maxFileBytes = 64 << 20
    /// What was read and computed of each file, while it stays the same file.
    private let cache = VariantCache()

    init(root: String, strictSecurityHeaders: Bool, moduleOrigins: [String] = [], securityPolicy: String? = nil) {
        self.moduleOrigins = Set(moduleOrigins)
        let path = Self.realPath(root) ?? root
        self.root = path.hasSuffix("/") ? path : path + "/"
        var headers = [("x-content-type-options", "nosniff")]
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
                let added = securityPolicy.split(separator: ";").map { $0.trimmingWhitespace }
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
    /// no cache hands one origin's answer to another (`also` joins that `vary`).
    func corsHeaders(path: String, origin: String?, also vary: [String] = []) -> [(String, String)] {
        guard Self.isModule(path) else { return vary.isEmpty ? [] : [("vary", vary.joined(separator: ", "))] }
        let varies = ("vary", (["origin"] + vary).joined(separator: ", "))
        guard let origin, moduleOrigins.contains(origin) else { return [varies] }
        // The origin may also time what it loaded (resource timing's sizes): what it moved.
        return [("access-control-allow-origin", origin), ("timing-allow-origin", origin), varies]
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

    /// What of a request decides a file's answer besides its path.
    struct Conditions: Sendable {
        /// The request's `origin` (a module's CORS headers).
        var origin: String?
        /// The request's `if-none-match`.
        var ifNoneMatch: String?
        /// The request's `accept-encoding` allows gzip.
        var acceptsGzip = false
        /// The URL's `v` parameter.
        var version: String?

        init(origin: String? = nil, ifNoneMatch: String? = nil, acceptsGzip: Bool = false, version: String? = nil) {
            self.origin = origin; self.ifNoneMatch = ifNoneMatch; self.acceptsGzip = acceptsGzip; self.version = version
        }

        /// Whether `accept-encoding`'s elements (``RequestHead/tokens(_:)``) allow gzip: `gzip`
        /// or `*` without `q=0`.
        static func acceptsGzip(_ elements: [String]) -> Bool {
            elements.contains { element in
                let parts = element.split(separator: ";").map { $0.trimmingWhitespace }
                guard parts.first == "gzip" || parts.first == "x-gzip" || parts.first == "*" else { return false }
                return !parts.dropFirst().contains { $0 == "q=0" || $0 == "q=0.0" || $0 == "q=0.00" || $0 == "q=0.000" }
            }
        }
    }

    /// The answer for a decoded, normalized path (see `RequestTarget`) under `conditions`:
    /// 200 with the file (gzipped when the client takes it and that is smaller), or 304 when
    /// `if-none-match` names what the client has; with the CORS headers of a module.
    func response(for path: String, _ conditions: Conditions) -> HTTPResponse {
        let variants: Variants, contentType: String
        switch self.variants(for: path) {
        case let .file(v, type): (variants, contentType) = (v, type)
        case let .refused(answer): return answer
        }
        let gzip = conditions.acceptsGzip ? variants.gzip : nil
        let etag = gzip == nil ? variants.etag : variants.gzipETag
        let immutable = conditions.version == variants.hash
        var headers = securityHeaders
        headers.append(("etag", etag))
        headers.append(("cache-control", immutable ? "public, max-age=31536000, immutable" : "no-cache"))
        headers += corsHeaders(path: path, origin: conditions.origin, also: variants.gzip == nil ? [] : ["accept-encoding"])
        if let ifNoneMatch = conditions.ifNoneMatch, Self.matches(ifNoneMatch, [variants.etag, variants.gzipETag]) {
            return HTTPResponse(status: 304, contentType: contentType, body: [], headers: headers)
        }
        if gzip != nil { headers.append(("content-encoding", "gzip")) }
        return HTTPResponse(status: 200, contentType: contentType, body: gzip ?? variants.identity, headers: headers)
    }

    /// Whether an `if-none-match` value names one of `etags` (weak comparison, RFC 9110
    /// §13.1.2: `W/` is not looked at), or is `*`.
    static func matches(_ ifNoneMatch: String, _ etags: [String]) -> Bool {
        for candidate in ifNoneMatch.split(separator: ",") {
            var tag = candidate.trimmingWhitespace
            if tag == "*" { return true }
            if tag.hasPrefix("W/") { tag.removeFirst(2) }
            if etags.contains(tag) { return true }
        }
        return false
    }

    /// The answer for a decoded, normalized path (see `RequestTarget`), with the CORS
    /// headers a module gets for a request from `origin`.
    func response(for path: String, origin: String?) -> HTTPResponse {
        response(for: path, Conditions(origin: origin))
    }

    /// The answer for a decoded, normalized path (see `RequestTarget`), without conditions.
    func response(for path: String) -> HTTPResponse { response(for: path, Conditions()) }

    private enum Lookup {
        case file(Variants, contentType: String)
        case refused(HTTPResponse)
    }

    /// The file at `path` as its variants: from the cache while the file is the same one
    /// (device, inode, size and modification time), else read and computed again.
    private func variants(for path: String) -> Lookup {
        var relative = String(path.dropFirst())
        if relative.isEmpty || relative.hasSuffix("/") { relative += "index.html" }
        guard !relative.split(separator: "/").contains(where: { $0.hasPrefix(".") }) else { return .refused(Self.notFound) }
        guard let real = Self.realPath(root + relative), real.hasPrefix(root) else { return .refused(Self.notFound) }
        let fd = open(real, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { return .refused(Self.notFound) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return .refused(Self.notFound) }
        guard info.st_size <= Self.maxFileBytes else {
            return .refused(HTTPResponse(status: 500, text: "500 Internal Server Error (file too large to serve)\n"))
        }
        let identity = FileIdentity(info)
        let contentType = Self.contentType(of: real)
        if let cached = cache.variants(of: real, identity) { return .file(cached, contentType: contentType) }
        var body = [UInt8](repeating: 0, count: Int(info.st_size))
        var offset = 0
        while offset < body.count {
            let n = body.withUnsafeMutableBytes { read(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            offset += n
        }
        body.removeSubrange(offset...)
        let variants = Variants(body, compressible: Self.isCompressible(contentType))
        // A file that changed while it was read is not kept: the next request reads it again.
        var after = stat()
        if fstat(fd, &after) == 0, FileIdentity(after) == identity { cache.keep(variants, of: real, identity) }
        return .file(variants, contentType: contentType)
    }

    /// Text compresses; images and fonts are compressed already.
    static func isCompressible(_ contentType: String) -> Bool {
        contentType.hasPrefix("text/") || contentType.hasPrefix("application/json") || contentType.hasPrefix("image/svg")
            || contentType.hasPrefix("application/manifest") || contentType.hasPrefix("application/wasm")
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

/// What tells one version of a file from another without reading it.
struct FileIdentity: Equatable, Sendable {
    let device: UInt64, inode: UInt64, size: Int64, seconds: Int, nanoseconds: Int

    init(_ info: stat) {
        device = UInt64(info.st_dev); inode = UInt64(info.st_ino); size = Int64(info.st_size)
        seconds = Int(info.st_mtim.tv_sec); nanoseconds = Int(info.st_mtim.tv_nsec)
    }
}

/// One version of a file as it is served: its bytes, gzipped when that is smaller, and its
/// validators.
struct Variants: Sendable {
    let identity: [UInt8]
    /// Nil when the file is not text, or gzip would not be smaller.
    let gzip: [UInt8]?
    /// The first 16 hex digits of the content's SHA-256: what a `v` parameter names.
    let hash: String
    /// `"HASH"`, and `"HASH-gzip"` for the gzipped bytes (a strong validator per representation).
    var etag: String { "\"\(hash)\"" }
    var gzipETag: String { "\"\(hash)-gzip\"" }

    /// Files below this are not worth a gzip header.
    static let gzipMinimum = 256

    init(_ body: [UInt8], compressible: Bool) {
        identity = body
        var digest = [UInt8](repeating: 0, count: 32)
        body.withUnsafeBytes { b in digest.withUnsafeMutableBufferPointer { tabd_sha256(b.baseAddress, b.count, $0.baseAddress) } }
        let hex = Array("0123456789abcdef")
        hash = String(digest.prefix(8).flatMap { [hex[Int($0 >> 4)], hex[Int($0 & 15)]] })
        guard compressible, body.count >= Self.gzipMinimum else { gzip = nil; return }
        var out = [UInt8](repeating: 0, count: tabd_gzip_bound(body.count))
        let written = body.withUnsafeBytes { b in out.withUnsafeMutableBytes { tabd_gzip(b.baseAddress, b.count, $0.baseAddress, $0.count) } }
        gzip = written > 0 && written < body.count ? Array(out.prefix(written)) : nil
    }
}

/// The variants of the files served so far, by real path; at most ``maxEntries`` (a web
/// root holds a few dozen files: past that, the oldest is forgotten) and ``maxBytes``.
final class VariantCache: Sendable {
    static let maxEntries = 256
    static let maxBytes = 32 << 20

    private struct State {
        var entries: [String: (FileIdentity, Variants)] = [:]
        var order: [String] = []
        var bytes = 0
    }

    private let state = Locked(State())  // (Locked: ThreadSanitizer sees it, not a Synchronization.Mutex)

    func variants(of path: String, _ identity: FileIdentity) -> Variants? {
        state.withLock { s in
            guard let (kept, variants) = s.entries[path], kept == identity else { return nil }
            return variants
        }
    }

    func keep(_ variants: Variants, of path: String, _ identity: FileIdentity) {
        let size = variants.identity.count + (variants.gzip?.count ?? 0)
        guard size <= Self.maxBytes / 4 else { return }
        state.withLock { s in
            if let old = s.entries.removeValue(forKey: path) {
                s.bytes -= old.1.identity.count + (old.1.gzip?.count ?? 0)
                s.order.removeAll { $0 == path }
            }
            while !s.order.isEmpty, s.order.count >= Self.maxEntries || s.bytes + size > Self.maxBytes {
                let oldest = s.order.removeFirst()
                if let gone = s.entries.removeValue(forKey: oldest) { s.bytes -= gone.1.identity.count + (gone.1.gzip?.count ?? 0) }
            }
            s.entries[path] = (identity, variants)
            s.order.append(path)
            s.bytes += size
        }
    }
}
