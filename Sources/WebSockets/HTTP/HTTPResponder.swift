import Locking

/// Answers one HTTP request, once, from any thread, now or later.
///
/// The handler gets one with each `HTTPRequest`. An answer given inside
/// `WebSocketServerHandler.httpRequest` is written at once; a later one wakes the service
/// thread, which writes it. Until then the connection waits (it reads nothing more, so a
/// pipelined request waits too). A responder dropped without an answer answers 500, so no
/// request waits forever.
public final class HTTPResponder: Sendable {
    private let exchanges: HTTPExchanges
    let id: UInt64
    /// Weak: a responder a handler keeps must not keep a stopped server alive.
    private weak let loop: ServiceLoop?

    init(exchanges: HTTPExchanges, id: UInt64, loop: ServiceLoop) {
        self.exchanges = exchanges
        self.id = id
        self.loop = loop
    }

    deinit {
        if exchanges.answer(id, with: HTTPExchanges.unanswered) { loop?.wakeForHTTPAnswers() }
    }

    /// Sends the response (a second call is ignored; ignored too when the connection is gone meanwhile).
    public func respond(_ response: HTTPResponse) {
        if exchanges.answer(id, with: response) { loop?.wakeForHTTPAnswers() }
    }

    /// Answers with `head`'s status and headers (its body is not sent) and then a body made
    /// as it goes: what the returned stream is sent (``HTTPStream``), at most `limit` bytes of
    /// it waiting for the peer. No `content-length`; the connection closes at the stream's end.
    /// When the connection is gone already, the stream is closed at once.
    public func stream(_ head: HTTPResponse, limit: Int) -> HTTPStream {
        let stream = HTTPStream(limit: limit)
        var response = head
        response.body = []
        response.stream = stream
        let waiting = exchanges.isWaiting(id)
        respond(response)
        if !waiting { stream.connectionGone() }
        return stream
    }

    /// Whether this request still waits for its answer to be written (for tests).
    var isPending: Bool { exchanges.isWaiting(id) }

    /// How many requests of this server wait for their answer to be written (for tests).
    var pendingCount: Int { exchanges.waitingCount }
}

/// The requests on dynamic paths that one server has open, from the handler's call until
/// their answer is written or their connection is gone.
///
/// Threads. `socketByID` belongs to the service thread. `answers` is shared with the
/// responders: a responder stores its response there and, unless the service thread is calling
/// the handler for that very request (it then finds the answer when the handler returns),
/// queues it in `ready` and asks for one wake-up per batch. An exchange leaves `answers`
/// when its answer is written or its connection closes; a responder whose exchange is gone
/// does nothing.
final class HTTPExchanges: @unchecked Sendable {
    // @unchecked Sendable: `socketByID` and `nextID` are touched on the service thread only
    // (responders use nothing but `answers`, a `Locked`).

    struct Slot {
        var response: HTTPResponse?
        /// The service thread is inside `httpRequest` for this exchange.
        var inHandler: Bool
    }

    struct Answers {
        /// Exchanges whose handler was called and whose answer is not written yet.
        var waiting: [UInt64: Slot] = [:]
        /// Answered from outside the handler call, not yet taken by the service thread.
        var ready: [UInt64] = []
        /// A wake-up was asked for and not taken yet.
        var wakePending = false
    }

    /// What a responder dropped without answering answers.
    static let unanswered = HTTPResponse(status: 500, text: "500 Internal Server Error (no answer)\n")

    private let answers = Locked(Answers())

    // Service thread only.
    private var socketByID: [UInt64: UInt64] = [:]
    private var nextID: UInt64 = 1

    // MARK: Any thread

    /// Stores the answer; true when the caller must wake the service thread.
    func answer(_ id: UInt64, with response: HTTPResponse) -> Bool {
        answers.withLock { a in
            guard let slot = a.waiting[id], slot.response == nil else { return false }
            a.waiting[id]?.response = response
            guard !slot.inHandler else { return false }
            a.ready.append(id)
            guard !a.wakePending else { return false }
            a.wakePending = true
            return true
        }
    }

    func isWaiting(_ id: UInt64) -> Bool { answers.withLock { $0.waiting[id] != nil } }

    var waitingCount: Int { answers.withLock { $0.waiting.count } }

    // MARK: Service thread

    /// Opens an exchange for a request on `socket`; the handler is about to be called.
    func open(socket: UInt64) -> UInt64 {
        let id = nextID
        nextID += 1
        socketByID[id] = socket
        answers.withLock { $0.waiting[id] = Slot(response: nil, inHandler: true) }
        return id
    }

    /// Forgets an exchange: answered, or its connection is gone. Its responder becomes a no-op.
    /// A stream given as its answer and never started ends (its connection is gone).
    func remove(_ id: UInt64, started: Bool = false) {
        socketByID[id] = nil
        let slot = answers.withLock { $0.waiting.removeValue(forKey: id) }
        if !started { slot?.response?.stream?.connectionGone() }
    }

    /// The handler returned; the answer it gave meanwhile, if any.
    func endHandling(_ id: UInt64) -> HTTPResponse? {
        answers.withLock { a in
            a.waiting[id]?.inHandler = false
            return a.waiting[id]?.response
        }
    }

    /// The answer given for `id`, if any (it stays until `remove`).
    func answer(for id: UInt64) -> HTTPResponse? {
        answers.withLock { $0.waiting[id]?.response }
    }

    /// The exchanges (and their sockets) answered since the last call; re-arms the wake-up.
    func takeReady() -> [(id: UInt64, socket: UInt64)] {
        let ids = answers.withLock { a -> [UInt64] in
            a.wakePending = false
            defer { a.ready = [] }
            return a.ready
        }
        return ids.compactMap { id in socketByID[id].map { (id, $0) } }
    }
}
