#if canImport(Glibc)
import Glibc
#endif

/// A small file read whole (a certificate, a key, a CA bundle), or why it cannot be, in
/// errno's words, so that the caller's message can name the file and the reason.
package enum SmallFile {
    package enum Failure: Error, Equatable {
        /// open() or read() failed: strerror's text.
        case unreadable(String)
        case tooLarge
        case empty
    }

    package static func read(_ path: String, limit: Int) -> Result<[UInt8], Failure> {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return .failure(.unreadable(String(cString: strerror(errno)))) }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16_384)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n == 0 { break }
            guard n > 0 else {
                if errno == EINTR { continue }
                return .failure(.unreadable(String(cString: strerror(errno))))
            }
            bytes += buffer[0..<n]
            guard bytes.count <= limit else { return .failure(.tooLarge) }
        }
        return bytes.isEmpty ? .failure(.empty) : .success(bytes)
    }
}
