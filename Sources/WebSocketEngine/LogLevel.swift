/// How much libwebsockets logs to stderr.
public enum WebSocketLogLevel: String, Sendable, CaseIterable {
    /// Errors only.
    case error
    /// Errors and warnings.
    case warn
    /// Same as `warn` for libwebsockets: its info output is chatter.
    case info
    /// Errors, warnings, notices and libwebsockets' info output.
    case debug
}
