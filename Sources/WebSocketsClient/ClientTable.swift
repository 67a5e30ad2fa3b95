@_spi(Engine) import WebSocketEngine
import Locking
/// The client's requests, as plain state shared between the caller threads and the service
/// thread (kept in a `Locked` by `ClientLoop`): connections to open, messages to send, closes.
/// Every mutating call made from another thread returns whether the service thread must be
/// woken; it is woken once per batch of requests.
struct ClientTable: Sendable {
    struct Connect: Sendable {
        let id: ConnectionID
        let url: WebSocketURL
        let subprotocols: String?
        let origin: String?
        /// The `Authorization` header's value, when given.
        let authorization: String?
    }

    struct CloseRequest: Sendable, Equatable {
        var code: CloseCode
        var reason: String
        /// Drop the socket without a close frame (and without sending what is queued).
        var abort: Bool
    }

    struct Connection: Sendable {
        var outgoing = Ring<[UInt8]>()
        var close: CloseRequest?
        /// Already listed in `writable`.
        var dirty = false
    }

    /// What the service thread must do after a wake-up.
    struct WakeWork: Sendable {
        var connects: [Connect] = []
        var writable: [ConnectionID] = []
    }

    /// What a writable callback must do next.
    enum Output: Sendable {
        case idle
        case message([UInt8], more: Bool)
        case close(CloseRequest)
        case unknown
    }

    private(set) var stopping = false
    /// The lws context is destroyed: nothing may wake the service thread any more.
    private(set) var contextGone = false
    private var nextID: UInt64 = 1
    private var connections: [ConnectionID: Connection] = [:]
    private var work = WakeWork()
    private var wakePending = false

    var count: Int { connections.count }

    /// Registers a connection to open; the service thread opens it on its next wake-up.
    mutating func connect(url: WebSocketURL, subprotocols: String?, origin: String?, authorization: String? = nil) -> (ConnectionID, wake: Bool) {
        let id = ConnectionID(rawValue: nextID)
        nextID += 1
        guard !stopping else { return (id, false) }
        connections[id] = Connection()
        work.connects.append(Connect(id: id, url: url, subprotocols: subprotocols, origin: origin, authorization: authorization))
        return (id, requestWake())
    }

    /// Queues one message. `markDirty` false: the caller requests the writable callback itself.
    mutating func send(_ message: [UInt8], to id: ConnectionID, markDirty: Bool) -> Bool {
        guard !stopping, let index = connections.index(forKey: id), connections.values[index].close == nil else {
            return false
        }
        connections.values[index].outgoing.append(message)
        return markDirty ? dirty(index) : false
    }

    mutating func close(_ id: ConnectionID, _ request: CloseRequest, markDirty: Bool) -> Bool {
        guard !stopping, let index = connections.index(forKey: id) else { return false }
        if let existing = connections.values[index].close, existing.abort || !request.abort { return false }
        connections.values[index].close = request
        return markDirty ? dirty(index) : false
    }

    mutating func stop() -> Bool {
        guard !stopping else { return false }
        stopping = true
        return requestWake()
    }

    // MARK: Service thread

    mutating func takeWakeWork() -> WakeWork {
        wakePending = false
        let taken = work
        work = WakeWork()
        for id in taken.writable {
            if let index = connections.index(forKey: id) { connections.values[index].dirty = false }
        }
        return taken
    }

    /// Whether anything waits to be written (or a close), for a connection that just opened.
    func hasOutput(_ id: ConnectionID) -> Bool {
        guard let c = connections[id] else { return false }
        return !c.outgoing.isEmpty || c.close != nil
    }

    mutating func takeOutput(_ id: ConnectionID) -> Output {
        guard let index = connections.index(forKey: id) else { return .unknown }
        if let close = connections.values[index].close, close.abort || connections.values[index].outgoing.isEmpty {
            return .close(close)
        }
        guard !connections.values[index].outgoing.isEmpty else { return .idle }
        let message = connections.values[index].outgoing.removeFirst()
        let c = connections.values[index]
        return .message(message, more: !c.outgoing.isEmpty || c.close != nil)
    }

    mutating func markContextGone() {
        stopping = true
        contextGone = true
    }

    mutating func remove(_ id: ConnectionID) -> CloseRequest? {
        connections.removeValue(forKey: id)?.close
    }

    private mutating func dirty(_ index: Dictionary<ConnectionID, Connection>.Index) -> Bool {
        guard !connections.values[index].dirty else { return false }
        connections.values[index].dirty = true
        work.writable.append(connections.keys[index])
        return requestWake()
    }

    private mutating func requestWake() -> Bool {
        guard !wakePending, !contextGone else { return false }
        wakePending = true
        return true
    }
}
