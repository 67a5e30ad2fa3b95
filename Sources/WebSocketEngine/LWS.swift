import CWebSockets
import FoundationEssentials
import Glibc
import Dispatch
import Locking
import Portable

/// What the server and the client both need from libwebsockets, in one place: the
/// open-file limit, the log mask, and close frames both ways.
package enum LWS {
    /// Why a context cannot take the connections it is asked for.
    package struct FileLimitTooLow: Error, Sendable {
        package let limit: Int
        package let required: Int
    }

    /// Open files kept out of lws' table: listener, cancel pipe, files being served, the
    /// state file, the engine's sockets, stdio, the rest of the process.
    package static let reservedFileDescriptors = 64

    /// Sockets beyond `maxConnections` a fitted limit leaves room for (HTTP requests, upgrades
    /// being refused).
    package static let fittedHeadroom = 1024

    /// The soft open-file limit, raised toward the hard one when `maxConnections` needs more.
    /// With `fit`, also lowered to `maxConnections` + 1,088 when it is higher: libwebsockets
    /// sizes its fd table by this limit, and Debian's build of 4.1 scans the whole table at
    /// every close (a debug check left on, `sanity_assert_no_sockfd_traces`): under systemd's
    /// 65,536 that is ~50 µs per closed connection, 0.8 s for 16,000 dropped at once. Only for
    /// a process of its own: the limit is the whole process's.
    package static func fileDescriptorLimit(for maxConnections: Int?, fit: Bool = false) throws(FileLimitTooLow) -> Int {
        var limits = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limits) == 0 else { return 1024 }
        let reserve = reservedFileDescriptors
        guard let maxConnections else { return Int(clamping: limits.rlim_cur) }
        let required = maxConnections + reserve
        if limits.rlim_cur < rlim_t(required) && limits.rlim_max > limits.rlim_cur {
            var raised = limits
            raised.rlim_cur = min(limits.rlim_max, rlim_t(required))
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limits = raised }
        }
        let fitted = rlim_t(required + fittedHeadroom)
        if fit && limits.rlim_cur > fitted {
            var lowered = limits
            lowered.rlim_cur = fitted
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &lowered) == 0 { limits = lowered }
        }
        guard limits.rlim_cur >= rlim_t(required) else {
            throw FileLimitTooLow(limit: Int(clamping: limits.rlim_cur), required: required)
        }
        return Int(clamping: limits.rlim_cur)
    }

    /// Sets what libwebsockets logs and where: to `sink` (one call per line, its level and
    /// text), or to stderr in lws' own format when nil. Process-wide: lws has one log.
    package static func setLogging(_ level: WebSocketLogLevel, sink: (@Sendable (WebSocketLogLevel, String) -> Void)?) {
        logSink.withLock { $0 = sink.map(LogSink.init) }
        lws_set_log_level(logMask(level), sink == nil ? nil : { level, line in
            guard let line, let sink = LWS.logSink.withLock({ $0 }) else { return }
            let text = String(cString: line).trimmingWhitespace
            guard !text.isEmpty else { return }
            let mapped: WebSocketLogLevel = level & tabd_lll_err() != 0 ? .error : level & tabd_lll_warn() != 0 ? .warn : .debug
            sink.write(mapped, text)
        })
    }

    /// A class, not the closure: a closure in a `Locked` state is re-wrapped by each
    /// `inout` read, a chain that grows with every line logged.
    private static let logSink = Locked<LogSink?>(nil)

    private final class LogSink: Sendable {
        let write: @Sendable (WebSocketLogLevel, String) -> Void
        init(_ write: @escaping @Sendable (WebSocketLogLevel, String) -> Void) { self.write = write }
    }

    package static func logMask(_ level: WebSocketLogLevel) -> Int32 {
        switch level {
        case .error: return tabd_lll_err()
        case .warn, .info: return tabd_lll_err() | tabd_lll_warn()
        case .debug: return tabd_lll_err() | tabd_lll_warn() | tabd_lll_notice() | tabd_lll_info()
        }
    }

    /// A peer's close payload: its code (nil when it had none) and its reason text.
    package static func parseClose(_ payload: UnsafeRawBufferPointer) -> (code: UInt16?, reason: String) {
        guard payload.count >= 2 else { return (nil, "") }
        return (UInt16(payload[0]) << 8 | UInt16(payload[1]), String(decoding: payload[2...], as: UTF8.self))
    }
}
