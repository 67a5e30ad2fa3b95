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

    /// Whether this request still waits for its answer to be written (for tests).
    var isPending: Bool { exchanges.isWaiting(id) }

    /// How many requests of this server wait for their answer to be written (for tests).
    var pendingCount: Int { exchanges.waitingCount }
}

/// The requests on dynamic paths that one server has open, from their headers until their
/// answer is written or their connection is gone.
///
/// Threads. `open` and `wsiByID` belong to the service thread. `answers` is shared with the
/// responders: a responder stores its response there and, unless the service thread is calling
/// the handler for that very request (it then finds the answer when the handler returns),
/// queues it in `ready` and asks for one wake-up per batch. An exchange leaves `answers`
/// when its answer is written or its connection closes; a responder whose exchange is gone
/// does nothing.
final class HTTPExchanges: @unchecked Sendable {
    // @unchecked Sendable: `open`, `wsiByID` and `nextID` are touched on the service thread
    // only (responders use nothing but `answers`, a `Locked`).

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
    private(set) var open: [OpaquePointer: HTTPExchange] = [:]
    private var wsiByID: [UInt64: OpaquePointer] = [:]
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

    func makeID() -> UInt64 {
        defer { nextID += 1 }
        return nextID
    }

    /// Tracks an exchange from its headers on.
    func add(_ exchange: HTTPExchange) {
        open[exchange.wsi] = exchange
        wsiByID[exchange.id] = exchange.wsi
    }

    /// Forgets an exchange: answered, or its connection is gone. Its responder becomes a no-op.
    func remove(_ exchange: HTTPExchange) {
        if open[exchange.wsi] === exchange { open[exchange.wsi] = nil }
        wsiByID[exchange.id] = nil
        _ = answers.withLock { $0.waiting.removeValue(forKey: exchange.id) }
    }

    /// The handler is about to be called for `id`.
    func beginHandling(_ id: UInt64) {
        answers.withLock { $0.waiting[id] = Slot(response: nil, inHandler: true) }
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

    /// The connections whose answers arrived since the last call; re-arms the wake-up.
    func takeReady() -> [OpaquePointer] {
        let ids = answers.withLock { a -> [UInt64] in
            a.wakePending = false
            defer { a.ready = [] }
            return a.ready
        }
        return ids.compactMap { wsiByID[$0] }
    }
}

/// One request on a dynamic path as the service thread sees it, from its headers until its
/// answer is written.
final class HTTPExchange {
    let id: UInt64
    let wsi: OpaquePointer
    let method: HTTPMethod
    let path: String
    let query: [String: String]
    let authorization: String?
    /// The body's `content-length`.
    let declaredLength: Int
    /// The client sent `expect: 100-continue`.
    let expectsContinue: Bool
    /// The request said nothing of a body (a `PUT` without `content-length`): it has none,
    /// but lws may still expect one, so the connection closes after the answer.
    var closeAfterAnswer = false
    /// Body bytes read so far (kept or not).
    var received = 0
    var body: [UInt8] = []
    var tooLarge = false
    /// Every body byte has arrived (or none was expected).
    var bodyComplete = false
    /// The handler has been called.
    var dispatched = false
    /// Reading from the connection is paused until the answer is written.
    var rxPaused = false

    init(
        id: UInt64, wsi: OpaquePointer, method: HTTPMethod, path: String, query: [String: String],
        authorization: String?, declaredLength: Int, expectsContinue: Bool
    ) {
        self.id = id
        self.wsi = wsi
        self.method = method
        self.path = path
        self.query = query
        self.authorization = authorization
        self.declaredLength = declaredLength
        self.expectsContinue = expectsContinue
    }

    var request: HTTPRequest {
        HTTPRequest(
            method: method, path: path, query: query, authorization: authorization,
            body: tooLarge ? [] : body, bodyTooLarge: tooLarge)
    }
}
