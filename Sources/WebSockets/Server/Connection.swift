/// One accepted socket as the service thread sees it, from its accept to its close: HTTP/1.1
/// requests one at a time, which may turn it into a WebSocket, then the closing of it.
///
/// Plain state; `ServiceLoop` decides and does the I/O. Confined to the service thread.
final class Connection {
    enum Phase {
        /// Reading requests and answering them (`http` holds where it is).
        case http
        /// A WebSocket (`session` holds it).
        case webSocket
        /// Nothing more is written but what lws still holds; then the sending side is shut.
        case flushing
        /// The sending side is shut; what still arrives is dropped until the peer closes
        /// (or the linger time passes).
        case lingering
    }

    /// Identifies the socket for the timer wheel and the HTTP exchanges; never reused.
    let socket: UInt64
    let wsi: OpaquePointer
    var phase = Phase.http
    var http = HTTPState()
    /// Set once the upgrade is done (and kept while it closes).
    var session: WebSocketSession?
    /// Unread bytes while it speaks HTTP: the request being read and what was sent after it.
    var input = InputBuffer()
    /// The HTTP answer being written, as the socket takes it (nil: none, or all handed to lws).
    var answer: AnswerOutput?
    /// Bytes of an answer reported to the table as held (`ConnectionTable.holdAnswer`); 0: none.
    var answerHeld = 0
    /// The deadline the timer wheel holds for it (uptime ns; 0: none).
    var deadline: UInt64 = 0
    /// Listed in `ServiceLoop.writesDue`.
    var writeQueued = false
    /// lws has closed it (its wsi must not be touched any more).
    var gone = false
    /// It is being dropped: lws closes it at its next callback.
    var killed = false
    /// lws reads nothing from it (too much unread input, or answers it has not taken).
    var readingPaused = false
    /// Its next requests wait until lws has written the answers it holds for it.
    var waitingForOutput = false
    /// The head of at least one request arrived whole (an HTTP request or the upgrade).
    var sawRequest = false
    /// A TLS server's connection whose peer spoke plain HTTP (its requests are only
    /// redirected to https or refused); known from its first bytes.
    var plainOnTLSPort = false
    /// Whether `plainOnTLSPort` has been decided (at the first bytes read).
    var transportKnown = false

    init(socket: UInt64, wsi: OpaquePointer) {
        self.socket = socket
        self.wsi = wsi
    }
}

/// Where a connection is in its current HTTP request.
struct HTTPState {
    enum Stage {
        /// Waiting for the next request's head.
        case head
        /// Reading the body of `request`.
        case body(HTTPRequestInProgress)
        /// The whole request is read; its answer is awaited (from the handler) or written.
        case answering(HTTPRequestInProgress)
        /// Reading and dropping the rest of a body that was refused; then the next request.
        case discarding(BodyReader)
        /// Writing a streamed body (``HTTPStream``) until its end; what the peer sends is
        /// dropped. The connection closes after it.
        case streaming(HTTPStream)
        /// No more requests on this connection.
        case done
    }

    var parser = HeadParser()
    var stage = Stage.head

    init(stage: Stage = .head) {
        self.stage = stage
    }
}

/// One request from its head to its answer.
final class HTTPRequestInProgress {
    enum Route {
        /// The handler answers (a dynamic path).
        case handler(HTTPMethod)
        /// The server answers with this once the body is read (files, 404, 405, 501).
        case local(HTTPResponse)
    }

    let head: RequestHead
    let target: RequestTarget
    let route: Route
    var reader: BodyReader
    var body: [UInt8] = []
    /// The body is longer than the handler may see: it gets `bodyTooLarge` instead.
    var tooLarge = false
    /// Set when the answer's exchange is open (handler route only).
    var exchangeID: UInt64?
    /// The connection closes after the answer.
    var closeAfter: Bool
    let expectsContinue: Bool

    init(head: RequestHead, target: RequestTarget, route: Route, reader: BodyReader, closeAfter: Bool, expectsContinue: Bool) {
        self.head = head
        self.target = target
        self.route = route
        self.reader = reader
        self.closeAfter = closeAfter
        self.expectsContinue = expectsContinue
    }

    var isHead: Bool { head.method == "HEAD" }
}

/// A WebSocket connection's protocol state.
final class WebSocketSession {
    let id: ConnectionID
    var decoder: FrameDecoder
    /// Events decoded from the last read (kept to reuse its storage).
    var events: [FrameEvent] = []
    /// The handshake's answer (101), written in front of the first frame.
    var handshake: [UInt8]?
    /// Control frames (pongs, pings, this side's close) to write before anything else.
    var control: [[UInt8]] = []
    /// After `control` is written, the connection is shut (a failure, or an echoed close).
    var closeAfterControl = false
    /// The close this side sent or decided on.
    var localClose: (code: CloseCode, reason: String)?
    /// The close the peer sent.
    var peerClose: (code: CloseCode?, reason: String)?
    /// Why it went without a close frame (no answer to pings).
    var dropReason: String?
    /// When bytes last came from the peer (uptime ns).
    var lastHeard: UInt64
    var pingSent = false
    /// Reported to the table as not taking writes (`ConnectionTable.setBlocked`).
    var blocked = false

    init(id: ConnectionID, decoder: FrameDecoder, now: UInt64) {
        self.id = id
        self.decoder = decoder
        self.lastHeard = now
    }
}

/// An HTTP answer on its way out: its head and body, written from their own storage (the
/// body as the handler made it, not copied) a piece at a time as the socket takes them.
struct AnswerOutput {
    private let pieces: [[UInt8]]
    private var piece = 0
    private var offset = 0
    /// Bytes of the whole answer (what holding it costs until it is written).
    let count: Int

    /// Answers up to `joinBelow` bytes go out as one piece (one write); larger ones as the
    /// head, then the body.
    init(head: [UInt8], body: [UInt8], joinBelow: Int) {
        if body.isEmpty {
            pieces = [head]
        } else if head.count + body.count <= joinBelow {
            pieces = [head + body]
        } else {
            pieces = [head, body]
        }
        count = head.count + body.count
    }

    var isDone: Bool { piece == pieces.count }

    /// Calls `write` with the next at most `max` bytes; advances by what it returns
    /// (negative: failed, nothing advanced). Returns `write`'s result.
    mutating func writeNext(max: Int, _ write: (UnsafeRawBufferPointer) -> Int) -> Int {
        guard !isDone else { return 0 }
        let n = Swift.min(max, pieces[piece].count - offset)
        let written = pieces[piece].withUnsafeBytes { write(UnsafeRawBufferPointer(rebasing: $0[offset..<(offset + n)])) }
        guard written > 0 else { return written }
        offset += written
        if offset == pieces[piece].count {
            piece += 1
            offset = 0
        }
        return written
    }
}

/// Bytes read and not yet parsed, consumed from the front.
struct InputBuffer {
    private var bytes: [UInt8] = []
    private var start = 0

    var isEmpty: Bool { start == bytes.count }
    var count: Int { bytes.count - start }

    mutating func append(_ piece: UnsafeRawBufferPointer) {
        if start > 0 && start == bytes.count {
            bytes.removeAll(keepingCapacity: bytes.capacity <= 64 * 1024)
            start = 0
        } else if start > 16 * 1024 && start * 2 > bytes.count {
            bytes.removeFirst(start)
            start = 0
        }
        bytes.append(contentsOf: piece)
    }

    mutating func consume(_ n: Int) {
        start += n
        if start == bytes.count {
            bytes.removeAll(keepingCapacity: bytes.capacity <= 64 * 1024)
            start = 0
        }
    }

    /// Gives the memory back (the connection became a WebSocket, or ends).
    mutating func release() {
        bytes = []
        start = 0
    }

    /// Calls `body` with the unread bytes (valid only during the call).
    func withUnread<R>(_ body: (UnsafeRawBufferPointer) throws(HTTPError) -> R) throws(HTTPError) -> R {
        let result: Result<R, HTTPError> = bytes.withUnsafeBytes { raw in
            do throws(HTTPError) {
                return .success(try body(UnsafeRawBufferPointer(rebasing: raw[start...])))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }
}
