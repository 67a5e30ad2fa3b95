import Locking
import WebSocketsClient

/// The Linux transport: libwebsockets through the project's `WebSocketsClient`, one
/// service thread for every connection of the transport.
public final class WebSocketTransport: TabdTransport {
    private let client: WebSocketClient
    private let router: Router

    /// Starts the service thread. `connectTimeoutSeconds` bounds opening a connection.
    /// `logLevel` is libwebsockets' (process-wide; nil leaves it as it is): by default only
    /// its errors reach stderr, not its notices about every refused connection. `wss://`
    /// connections verify the server against `tls`.
    public init(connectTimeoutSeconds: Int = 10, logLevel: WebSocketLogLevel? = .error, tls: TLSTrust = .system) throws(WebSocketClientError) {
        router = Router()
        var configuration = ClientConfiguration(maxConnections: 8, logLevel: logLevel, connectTimeoutSeconds: connectTimeoutSeconds,
                                                threadName: "tabd-client")
        configuration.tls = tls
        client = try WebSocketClient(configuration: configuration, handler: router)
    }

    public func open(_ url: String) -> any TabdConnection { open(url, authorization: nil) }

    public func open(_ url: String, authorization: String?) -> any TabdConnection {
        let (events, continuation) = AsyncStream.makeStream(of: TransportEvent.self)
        func refuse(_ reason: String) -> any TabdConnection {
            continuation.yield(.closed(TransportClose(code: nil, reason: reason, wasOpen: false)))
            continuation.finish()
            return Connection(id: nil, client: client, events: events)
        }
        // After shutdown the client opens nothing and would report no `closed`.
        guard !isShutDown.withLock({ $0 }) else { return refuse("the transport is shut down") }
        guard let target = WebSocketURL(url) else { return refuse("not a ws:// or wss:// URL: \(url)") }
        let id = client.connect(target, subprotocols: "tabd.v1", authorization: authorization)
        router.attach(id, continuation)
        return Connection(id: id, client: client, events: events)
    }

    public func shutdown() async {
        isShutDown.withLock { $0 = true }
        await client.shutdown()
    }

    private let isShutDown = Locked(false)

    private struct Connection: TabdConnection {
        let id: ConnectionID?
        let client: WebSocketClient
        let events: AsyncStream<TransportEvent>

        func send(_ text: [UInt8]) {
            if let id { client.send(text, on: id) }
        }

        func close(code: UInt16, reason: String) {
            if let id { client.close(id, code: CloseCode(rawValue: code) ?? .normal, reason: reason) }
        }
    }

    /// Hands each connection's callbacks (on the service thread) to its stream. A callback
    /// may come before `attach` (the service thread can open the connection before
    /// `connect` has returned here): it waits in `early` until then. Events are yielded
    /// under the lock, so the early ones and the ones racing `attach` keep their order.
    /// That is the one exception to `Locked`'s "never call out": yielding to an
    /// `AsyncStream` only enqueues, and these streams have no `onTermination` handler,
    /// so nothing of anyone else's runs under the lock.
    private final class Router: WebSocketClientHandler {
        private struct Routes {
            var streams: [ConnectionID: AsyncStream<TransportEvent>.Continuation] = [:]
            var early: [ConnectionID: [TransportEvent]] = [:]

            mutating func deliver(_ event: TransportEvent, _ id: ConnectionID) {
                guard let continuation = streams[id] else {
                    early[id, default: []].append(event)
                    return
                }
                continuation.yield(event)
                if case .closed = event {
                    continuation.finish()
                    streams[id] = nil
                }
            }
        }
        private let routes = Locked(Routes())

        func attach(_ id: ConnectionID, _ continuation: AsyncStream<TransportEvent>.Continuation) {
            routes.withLock { r in
                r.streams[id] = continuation
                for event in r.early.removeValue(forKey: id) ?? [] { r.deliver(event, id) }
            }
        }

        func opened(_ id: ConnectionID, subprotocol: String?) { route(.opened, id) }

        func received(_ id: ConnectionID, message: UnsafeRawBufferPointer, binary: Bool) {
            guard !binary else { return } // tabd sends text only
            route(.message(Array(message)), id)
        }

        func closed(_ id: ConnectionID, _ close: ClientClose) {
            route(.closed(TransportClose(code: close.code, reason: close.reason, wasOpen: close.wasOpen, httpStatus: close.httpStatus)), id)
        }

        private func route(_ event: TransportEvent, _ id: ConnectionID) {
            routes.withLock { $0.deliver(event, id) }
        }
    }
}
