import FoundationEssentials
import Glibc
import Dispatch

/// Tells systemd how tabd is doing, as `sd_notify(3)` does, without linking libsystemd: one
/// datagram to the socket named by `NOTIFY_SOCKET` (a path, or an abstract name after `@`).
/// Nothing is sent when the variable is not set (tabd not started by systemd, or a unit
/// that is not `Type=notify`).
enum SystemdNotify {
    /// Sends `state` (`READY=1`, `STOPPING=1`, `STATUS=…`, lines of them); false when there
    /// is no socket to send to or the send failed.
    @discardableResult
    static func send(_ state: String, environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
        guard let name = environment["NOTIFY_SOCKET"], !name.isEmpty else { return false }
        var path = Array(name.utf8)
        let abstract = path.first == UInt8(ascii: "@")
        if abstract { path[0] = 0 }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard path.count < capacity, abstract || path.first == UInt8(ascii: "/") else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, byte) in path.enumerated() { raw[i] = byte }
        }
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        // An abstract name's length counts exactly its bytes; a path's, its bytes and the NUL.
        let length = socklen_t(MemoryLayout<sa_family_t>.size + path.count + (abstract ? 0 : 1))
        let bytes = Array(state.utf8)
        let sent = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { addr in
                bytes.withUnsafeBytes { sendto(fd, $0.baseAddress, bytes.count, Int32(MSG_NOSIGNAL), addr, length) }
            }
        }
        return sent == bytes.count
    }
}
