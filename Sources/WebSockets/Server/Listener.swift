import CWebSockets
import FoundationEssentials
import Glibc
import Dispatch

/// The server's listening socket: bound by tabd itself (so a failure says why), non-blocking,
/// handed to lws only to be watched. Accepting is tabd's, so it can stop before the process
/// runs out of files (see `ServiceLoop.acceptConnections`).
struct Listener {
    let fd: Int32
    /// The port really listened on (resolves port 0).
    let port: Int

    /// Where to bind: nil for every interface.
    struct Address {
        var literal: String?
        var isIPv4: Bool
    }

    static func address(_ host: String) throws(WebSocketServerError) -> Address {
        switch host {
        case "", "*", "::":
            return Address(literal: nil, isIPv4: false)
        case "0.0.0.0":
            return Address(literal: nil, isIPv4: true)
        case "localhost":
            return Address(literal: "127.0.0.1", isIPv4: true)
        default:
            var v4 = in_addr()
            var v6 = in6_addr()
            if inet_pton(AF_INET, host, &v4) == 1 { return Address(literal: host, isIPv4: true) }
            if inet_pton(AF_INET6, host, &v6) == 1 { return Address(literal: host, isIPv4: false) }
            throw .invalidConfiguration("host \(host) is not an IP address (or localhost, or 0.0.0.0)")
        }
    }

    /// `bind(2)` to a `sockaddr_in` or `sockaddr_in6`.
    private static func bind<Address>(_ fd: Int32, to address: inout Address) -> Int32 {
        withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<Address>.size)) }
        }
    }

    /// Binds and listens; every interface of both families for "", "*" and "::".
    init(host: String, port: Int) throws(WebSocketServerError) {
        let address = try Self.address(host)
        let family = address.isIPv4 ? AF_INET : AF_INET6
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .cannotBind(host: host, port: port, reason: String(cString: strerror(errno))) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var result: Int32
        if address.isIPv4 {
            var sa = sockaddr_in()
            sa.sin_family = sa_family_t(AF_INET)
            sa.sin_port = in_port_t(UInt16(port).bigEndian)
            if let literal = address.literal { inet_pton(AF_INET, literal, &sa.sin_addr) }
            result = Self.bind(fd, to: &sa)
        } else {
            var zero: Int32 = 0
            if address.literal == nil { setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &zero, socklen_t(MemoryLayout<Int32>.size)) }
            var sa = sockaddr_in6()
            sa.sin6_family = sa_family_t(AF_INET6)
            sa.sin6_port = in_port_t(UInt16(port).bigEndian)
            if let literal = address.literal { inet_pton(AF_INET6, literal, &sa.sin6_addr) }
            result = Self.bind(fd, to: &sa)
        }
        // A backlog the kernel caps at net.core.somaxconn: bursts of handshakes wait there.
        if result == 0 { result = listen(fd, 4096) }
        guard result == 0 else {
            let error = errno
            close(fd)
            if error == EADDRINUSE { throw .addressInUse(host: host, port: port) }
            throw .cannotBind(host: host, port: port, reason: String(cString: strerror(error)))
        }
        var bound = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &bound) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        let boundPort: UInt16 = withUnsafePointer(to: &bound) { pointer in
            if address.isIPv4 {
                return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) }
            }
            return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin6_port) }
        }
        self.fd = fd
        self.port = Int(boundPort)
    }
}
