import CNATS
import FoundationEssentials
import Dispatch
import Glibc
import Portable

/// What an engine server says of itself: its version, id and name, from the `INFO` line
/// that every NATS server sends first on a new connection.
///
/// Why that line: libnats 3.4.1 reads the same line when it connects but keeps it to itself
/// (no accessor for the server's version); JetStream's API answers carry no server version
/// (`$JS.API.INFO` gains an API level only in 2.11, nothing in 2.9 or 2.10); and the
/// monitoring port (`/varz`) or the system account are not something a node is given. The
/// INFO line is part of NATS's client protocol, comes in clear before TLS and before any
/// credentials (unless a server is set to start with the TLS handshake), and carries
/// `version` and `server_id`; the `server_id` is checked against the one libnats is connected
/// to, so the version read is that server's. It costs one TCP connection per (re)connect,
/// closed as soon as the line is read.
public struct EngineServerInfo: Sendable, Equatable {
    /// The server's version as it gives it ("2.15.1").
    public let version: String
    public let serverID: String
    /// The server's `server_name` (its id when it has none).
    public let serverName: String
    public let jetStream: Bool
    /// The URL the line was read from, without a user or password (``EngineURL``).
    public let url: String
    /// Whether `serverID` is the server libnats is connected to (false: another server
    /// answered at the same address, such as behind a load balancer).
    public let isConnectedServer: Bool

    /// The version's numbers: "2.10.0-beta.1" is [2, 10, 0].
    public var versionNumbers: [Int] { Self.numbers(version) }

    /// Whether the version is at least `major.minor`.
    public func atLeast(_ major: Int, _ minor: Int) -> Bool {
        let n = versionNumbers + [0, 0]
        return (n[0], n[1]) >= (major, minor)
    }

    /// Whether the version is at least `major.minor.patch`.
    public func atLeast(_ major: Int, _ minor: Int, _ patch: Int) -> Bool {
        let n = versionNumbers + [0, 0, 0]
        return (n[0], n[1], n[2]) >= (major, minor, patch)
    }

    /// Whether this server can sync JetStream's writes to disk before it acks them: NATS
    /// 2.10 added `jetstream { sync_interval: always }`; 2.9 syncs every two minutes, and
    /// nothing changes that. Whether a 2.10+ server is configured so, no client can read.
    public var canSyncBeforeAck: Bool { atLeast(2, 10) }

    static func numbers(_ version: String) -> [Int] {
        var out: [Int] = []
        for part in version.drop(while: { $0 == "v" }).split(separator: ".", maxSplits: 2) {
            guard let n = Int(part.prefix(while: \.isNumber)) else { break }
            out.append(n)
            if part.contains(where: { !$0.isNumber }) { break }
        }
        return out
    }

    /// The fields of an INFO line (`INFO {json}`), or nil when it is not one.
    static func parse(line: [UInt8], url: String, connectedID: String?) -> EngineServerInfo? {
        /// The INFO fields read; the others are ignored.
        struct Info: Decodable {
            let version: String
            let server_id: String
            let server_name: String?
            let jetstream: Bool?
        }
        guard line.starts(with: Array("INFO ".utf8)),
              let info = try? JSONDecoder().decode(Info.self, from: Data(line.dropFirst(5))) else { return nil }
        let name = info.server_name.flatMap { $0.isEmpty ? nil : $0 } ?? info.server_id
        return EngineServerInfo(version: info.version, serverID: info.server_id, serverName: name, jetStream: info.jetstream ?? false,
                                url: url, isConnectedServer: connectedID == nil || connectedID == info.server_id)
    }

    /// Host and port of a NATS URL (`nats://`, `tls://`, with or without credentials;
    /// IPv6 in brackets; 4222 when no port is given).
    static func hostAndPort(_ url: String) -> (host: String, port: UInt16)? {
        var rest = Substring(url)
        if let scheme = rest.firstRange(of: "://") { rest = rest[scheme.upperBound...] }
        if let at = rest.lastIndex(of: "@") { rest = rest[rest.index(after: at)...] }
        if let slash = rest.firstIndex(of: "/") { rest = rest[..<slash] }
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { return nil }
            let host = String(rest[rest.index(after: rest.startIndex)..<close])
            let after = rest[rest.index(after: close)...]
            guard after.isEmpty || after.hasPrefix(":") else { return nil }
            guard let port = after.isEmpty ? 4222 : UInt16(after.dropFirst()) else { return nil }
            return (host, port)
        }
        let parts = rest.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count <= 2, let host = parts.first, !host.isEmpty else { return nil }
        guard let port = parts.count == 2 ? UInt16(parts[1]) : 4222 else { return nil }
        return (String(host), port)
    }

    /// Connects to `host`:`port` over plain TCP and reads the server's first line (its INFO),
    /// within `timeoutMs` for the connect and again for the read.
    static func readInfoLine(host: String, port: UInt16, timeoutMs: Int) -> Result<[UInt8], ProbeFailure> {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_family = AF_UNSPEC
        var found: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &found)
        guard rc == 0, let first = found else { return .failure(ProbeFailure("cannot resolve \(host): \(String(cString: gai_strerror(rc)))")) }
        defer { freeaddrinfo(first) }
        var lastError = "no address"
        var next: UnsafeMutablePointer<addrinfo>? = first
        while let ai = next {
            next = ai.pointee.ai_next
            let fd = socket(ai.pointee.ai_family, ai.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue), ai.pointee.ai_protocol)
            guard fd >= 0 else { lastError = String(cString: strerror(errno)); continue }
            defer { close(fd) }
            // On Linux the send timeout bounds connect() too.
            var tv = timeval(tv_sec: timeoutMs / 1000, tv_usec: (timeoutMs % 1000) * 1000)
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
            guard connect(fd, ai.pointee.ai_addr, ai.pointee.ai_addrlen) == 0 else { lastError = String(cString: strerror(errno)); continue }
            var line: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(timeoutMs) * 1_000_000
            while line.count < 64 * 1024 {
                let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if n > 0 {
                    line += buffer[..<n]
                    if let end = line.firstIndex(of: 0x0A) {
                        return .success(Array(line[..<end]).filter { $0 != 0x0D })
                    }
                    if DispatchTime.now().uptimeNanoseconds > deadline { break }
                    continue
                }
                if n < 0, errno == EINTR { continue }
                return .failure(ProbeFailure(n == 0 ? "the server closed the connection before its INFO line"
                                                    : "no INFO line within \(timeoutMs) ms (a server that starts with the TLS handshake sends none in clear)"))
            }
            return .failure(ProbeFailure("no INFO line in the server's first \(line.count) bytes"))
        }
        return .failure(ProbeFailure("cannot connect to \(host):\(port): \(lastError)"))
    }

    struct ProbeFailure: Error, CustomStringConvertible {
        let description: String
        init(_ d: String) { description = d }
    }
}

extension EngineClient {
    /// The version and name of the engine server this connection is on now, read from that
    /// server's INFO line (see ``EngineServerInfo``); a failure says why it could not be read.
    /// Blocks for up to twice `timeoutMs`: call it off libnats' threads.
    public func connectedServerInfo(timeoutMs: Int = 1000) -> Result<EngineServerInfo, EngineError> {
        let (connected, id) = connectedServer()
        guard let connected else { return .failure(EngineError(invalid: "not connected to an engine server")) }
        // Said in logs and errors: without a user or password libnats may give with it.
        let url = EngineURL.redacted(connected)
        guard let (host, port) = EngineServerInfo.hostAndPort(connected) else { return .failure(EngineError(invalid: "cannot read the address in \(url)")) }
        // Another server may answer at the same address (a load balancer): asked up to 3 times.
        var seen: EngineServerInfo?
        for _ in 1...3 {
            switch EngineServerInfo.readInfoLine(host: host, port: port, timeoutMs: timeoutMs) {
            case let .failure(why): return .failure(EngineError(invalid: "\(url): \(why)"))
            case let .success(line):
                guard let info = EngineServerInfo.parse(line: line, url: url, connectedID: id) else {
                    return .failure(EngineError(invalid: "\(url): not a NATS INFO line"))
                }
                if info.isConnectedServer { return .success(info) }
                seen = info
            }
        }
        return seen.map { .success($0) } ?? .failure(EngineError(invalid: "\(url): no answer"))
    }
}
