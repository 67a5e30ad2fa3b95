/// Why a `WebSocketServer` could not be created.
public enum WebSocketServerError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Another process already listens on this address and port.
    case addressInUse(host: String, port: Int)
    /// The address cannot be bound (not an address of this machine, or not permitted).
    case cannotBind(host: String, port: Int, reason: String)
    /// `Configuration.webRoot` does not exist or is not a directory.
    case webRootMissing(path: String)
    /// The process may not open enough files for `Configuration.maxConnections`.
    case fileDescriptorLimitTooLow(limit: Int, required: Int)
    /// A configuration value is out of range.
    case invalidConfiguration(String)
    /// libwebsockets refused to create its context for another reason (see its log on stderr).
    case libwebsocketsFailed(String)
    /// The TLS certificate or key cannot be used (the message names the file).
    case tls(TLSError)

    public var description: String {
        switch self {
        case let .addressInUse(host, port):
            return "cannot listen on \(host):\(port): the port is already in use"
        case let .cannotBind(host, port, reason):
            return "cannot listen on \(host):\(port): \(reason)"
        case let .webRootMissing(path):
            return "web root \(path) does not exist or is not a directory"
        case let .fileDescriptorLimitTooLow(limit, required):
            return "the open-file limit (ulimit -n) is \(limit), but \(required) are needed; raise it"
        case let .invalidConfiguration(message):
            return "invalid configuration: \(message)"
        case let .libwebsocketsFailed(message):
            return "libwebsockets failed: \(message)"
        case let .tls(error):
            return error.description
        }
    }
}
