import CWebSockets

/// The HTTP side of the service thread: upgrade decisions, and requests on dynamic paths from
/// their headers to their answer.
///
/// A request on a dynamic path (LWS_CALLBACK_HTTP) becomes an `HTTPExchange`. Its body arrives
/// in LWS_CALLBACK_HTTP_BODY chunks and ends with LWS_CALLBACK_HTTP_BODY_COMPLETION; then the
/// handler is called (at once when there is no body, or when it is too large). An answer given
/// during that call is written there; until a later one comes, reading from the connection is
/// paused, and the answer arrives through `wakeForHTTPAnswers` (lws_cancel_service), to be
/// written in LWS_CALLBACK_EVENT_WAIT_CANCELLED. Writing resumes reading and ends the
/// transaction (`lws_http_transaction_completed`, keep-alive); LWS_CALLBACK_CLOSED_HTTP
/// forgets an exchange whose client left first.
///
/// Known lws 4.1.6 fault, not worked around here (no public API can see it coming): a request
/// *with a body* that a client pipelines behind another request in the same packet is parsed
/// from lws' buffer list, and `lws_http_action` then feeds that same buffer again as the body
/// (the body holds the request's own header bytes) and, once answered, loops forever in it.
/// Clients that wait for each answer (browsers, curl, URLSession) never do this.
extension ServiceLoop {
    /// LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: 0 lets the upgrade proceed, 1 means "answered".
    func confirmUpgrade(_ wsi: OpaquePointer, to upgrade: String?) -> Int32 {
        guard upgrade?.lowercased() == "websocket" else {
            return reject(wsi, status: 400)
        }
        let path = Self.header(wsi, WSI_TOKEN_GET_URI) ?? ""
        guard path == configuration.webSocketPath else { return reject(wsi, status: 404) }
        if let offered = Self.header(wsi, WSI_TOKEN_PROTOCOL), !Self.offers(offered, configuration.subprotocol) {
            // lws would hang up without an answer; say why instead.
            return reject(wsi, status: 400, message: "unsupported subprotocol; use \(configuration.subprotocol)")
        }
        guard table.withLock({ $0.phase == .running }) else { return reject(wsi, status: 503) }
        let request = upgradeRequest(wsi)
        switch handler.shouldAccept(request) {
        case .accept:
            lastUpgrade = (wsi, request)
            return 0
        case let .reject(status):
            return reject(wsi, status: status)
        }
    }

    private func reject(_ wsi: OpaquePointer, status: Int, message: String? = nil) -> Int32 {
        let text = "\(status) \(message ?? Self.reasonPhrase(status))\n"
        // lws completes the transaction itself when we return 1.
        // lws has not parsed the HTTP version of an upgrade request yet (it would answer
        // HTTP/1.0), so the status line is written here.
        return Self.respond(wsi, HTTPResponse(status: status, text: text), upgradeRejection: true) ? 1 : -1
    }

    func upgradeRequest(_ wsi: OpaquePointer) -> UpgradeRequest {
        let offered = Self.header(wsi, WSI_TOKEN_PROTOCOL)
        return UpgradeRequest(
            path: Self.header(wsi, WSI_TOKEN_GET_URI) ?? "",
            query: Self.query(wsi),
            origin: Self.header(wsi, WSI_TOKEN_ORIGIN),
            host: Self.header(wsi, WSI_TOKEN_HOST),
            authorization: Self.header(wsi, WSI_TOKEN_HTTP_AUTHORIZATION),
            subprotocol: offered.flatMap { Self.offers($0, configuration.subprotocol) ? configuration.subprotocol : nil },
            peer: Self.peer(wsi))
    }

    // MARK: Requests

    static let notFound = HTTPResponse(status: 404, text: "404 Not Found\n")
    static let lengthRequired = HTTPResponse(
        status: 411, text: "411 Length Required (send a content-length; chunked bodies are not supported)\n")
    /// Unread body bytes a finished request may leave for lws to read and drop; with more, the
    /// connection is closed after the answer instead.
    static let bodyDiscardLimit = 1 << 20

    /// Whether `path` goes to the handler.
    func isDynamic(_ path: String) -> Bool {
        dynamicPaths.contains(path) || configuration.dynamicPrefixes.contains { path.hasPrefix($0) }
    }

    /// LWS_CALLBACK_HTTP: a request no file mount took: dynamic paths (any method), missing
    /// files, anything without a web root (GET and HEAD; other methods answer 405).
    func answerHTTP(_ wsi: OpaquePointer) -> Int32 {
        if let stale = http.open[wsi] {
            // Reading pauses while an exchange is open, so this is a new connection at the
            // address of one whose close we did not hear: forget the old one.
            http.remove(stale)
        }
        let (method, target) = Self.requestLine(wsi)
        let framing = Self.bodyFraming(wsi, method)
        let expectsContinue = Self.expectsContinue(wsi)
        guard let path = target, isDynamic(path) else {
            let response = method == .get || method == .head
                ? Self.notFound
                : HTTPResponse(status: 405, text: "405 Method Not Allowed\n", headers: [("allow", "GET, HEAD")])
            return answerAtOnce(wsi, response, framing: framing, expectsContinue: expectsContinue, headOnly: method == .head)
        }
        guard let method else {
            let allow = "GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS"
            let response = HTTPResponse(status: 405, text: "405 Method Not Allowed\n", headers: [("allow", allow)])
            return answerAtOnce(wsi, response, framing: framing, expectsContinue: expectsContinue, headOnly: false)
        }
        let length: Int
        switch framing {
        case let .length(n):
            length = n
        case .missingLength:
            // HTTP/1.1 (RFC 9112 §6.3): no content-length and no transfer-encoding means no
            // body — `curl -X PUT URL` sends that. Answered, then closed (lws may wait for one).
            length = 0
        case .chunked:
            return answerAtOnce(wsi, Self.lengthRequired, framing: framing, expectsContinue: expectsContinue, headOnly: method == .head)
        case .invalid:
            let response = HTTPResponse(status: 400, text: "400 Bad Request (content-length)\n")
            return answerAtOnce(wsi, response, framing: framing, expectsContinue: expectsContinue, headOnly: method == .head)
        }
        let exchange = HTTPExchange(
            id: http.makeID(), wsi: wsi, method: method, path: path, query: Self.query(wsi),
            authorization: Self.header(wsi, WSI_TOKEN_HTTP_AUTHORIZATION), declaredLength: length,
            expectsContinue: expectsContinue)
        exchange.closeAfterAnswer = framing == .missingLength
        http.add(exchange)
        if length > configuration.maxRequestBodyBytes {
            // Known from the headers: no byte of it is kept.
            exchange.tooLarge = true
            return dispatch(exchange)
        }
        if length == 0 {
            exchange.bodyComplete = true
            return dispatch(exchange)
        }
        exchange.body.reserveCapacity(length)
        if expectsContinue && !Self.writeContinue(wsi) {
            http.remove(exchange)
            return -1
        }
        return 0  // lws reads the body next (LRS_BODY)
    }

    /// Answers a request the handler does not see. Closes the connection afterwards when lws
    /// could not tell where the next request starts.
    private func answerAtOnce(
        _ wsi: OpaquePointer, _ response: HTTPResponse, framing: BodyFraming, expectsContinue: Bool, headOnly: Bool
    ) -> Int32 {
        let closeAfter = switch framing {
        case let .length(n): n > Self.bodyDiscardLimit || (n > 0 && expectsContinue)
        case .chunked, .missingLength, .invalid: true
        }
        return write(response, to: wsi, headOnly: headOnly, closeAfter: closeAfter)
    }

    /// Writes the response, then ends the transaction (keep-alive) or the connection.
    private func write(_ response: HTTPResponse, to wsi: OpaquePointer, headOnly: Bool, closeAfter: Bool) -> Int32 {
        var response = response
        if closeAfter { response.headers.append(("connection", "close")) }
        guard Self.respond(wsi, response, headOnly: headOnly), !closeAfter else { return -1 }
        // With body bytes left (a refused body), lws reads and drops them first (LRS_DISCARD_BODY).
        return lws_http_transaction_completed(wsi) != 0 ? -1 : 0
    }

    /// Calls the handler; writes its answer if it gave one during the call.
    private func dispatch(_ exchange: HTTPExchange) -> Int32 {
        exchange.dispatched = true
        let request = exchange.request
        exchange.body = []
        http.beginHandling(exchange.id)
        handler.httpRequest(request, responder: HTTPResponder(exchanges: http, id: exchange.id, loop: self))
        if let response = http.endHandling(exchange.id) {
            return finish(exchange, response)
        }
        if exchange.bodyComplete { waitForAnswer(exchange) }
        return 0
    }

    /// The whole request is read and its answer comes later.
    private func waitForAnswer(_ exchange: HTTPExchange) {
        guard !exchange.rxPaused else { return }
        exchange.rxPaused = true
        // lws gave the request PENDING_TIMEOUT_HTTP_CONTENT (5 s) to arrive; that is over, and
        // the answer may take longer.
        lws_set_timeout(exchange.wsi, NO_PENDING_TIMEOUT, 0)
        // For a bodiless request lws stays in LRS_ESTABLISHED and would parse the next
        // (pipelined) request into the header table we still answer for; after a body it would
        // report a second BODY_COMPLETION. So read nothing until the answer is out. A client
        // that leaves meanwhile is noticed when the answer is written (or at once on a reset).
        lws_rx_flow_control(exchange.wsi, 0)
    }

    /// Writes an exchange's answer and ends it.
    private func finish(_ exchange: HTTPExchange, _ response: HTTPResponse) -> Int32 {
        http.remove(exchange)
        let unread = exchange.declaredLength - exchange.received
        // A client that expects 100-continue and did not get it may never send the body.
        let closeAfter = exchange.closeAfterAnswer || unread > 0 && (unread > Self.bodyDiscardLimit || exchange.expectsContinue)
        // Before writing: while reading is paused lws also leaves a buffered tail unsent.
        if exchange.rxPaused { lws_rx_flow_control(exchange.wsi, 1) }
        return write(response, to: exchange.wsi, headOnly: exchange.method == .head, closeAfter: closeAfter)
    }

    /// LWS_CALLBACK_HTTP_BODY; nil when the connection has no exchange (lws' default applies).
    func receiveBody(_ wsi: OpaquePointer, _ bytes: UnsafeRawBufferPointer) -> Int32? {
        guard let exchange = http.open[wsi] else { return nil }
        exchange.received += bytes.count
        guard !exchange.dispatched else { return 0 }  // too large: dropped
        guard exchange.body.count + bytes.count <= configuration.maxRequestBodyBytes else {
            // lws reads `content-length` bytes, which were checked; kept as a guard.
            exchange.tooLarge = true
            return dispatch(exchange)
        }
        exchange.body.append(contentsOf: bytes)
        return 0
    }

    /// LWS_CALLBACK_HTTP_BODY_COMPLETION; nil when the connection has no exchange.
    func completeBody(_ wsi: OpaquePointer) -> Int32? {
        guard let exchange = http.open[wsi] else { return nil }
        exchange.bodyComplete = true
        if !exchange.dispatched { return dispatch(exchange) }
        waitForAnswer(exchange)  // called early (too large or no body), answer still to come
        return 0
    }

    /// LWS_CALLBACK_CLOSED_HTTP: the client left; its responder becomes a no-op.
    func closedHTTP(_ wsi: OpaquePointer) {
        if let exchange = http.open[wsi] { http.remove(exchange) }
    }

    /// LWS_CALLBACK_EVENT_WAIT_CANCELLED: writes the answers that arrived since the last wake-up.
    ///
    /// Written here, not in LWS_CALLBACK_HTTP_WRITEABLE: lws (4.1, h1) handles no POLLOUT of
    /// a connection whose reading is paused (`rops_handle_POLLIN_h1` returns early), and
    /// resuming reads first would let it parse a pipelined request before the answer.
    /// `lws_write` outside the writeable callback is fine for h1: a tail the socket does not
    /// take is buffered and sent on POLLOUT, and `lws_http_transaction_completed` waits for it.
    func writeArrivedAnswers() {
        for wsi in http.takeReady() {
            guard let exchange = http.open[wsi], let response = http.answer(for: exchange.id) else { continue }
            if finish(exchange, response) != 0 {
                // Not inside this connection's callback, so it cannot be closed by returning -1.
                lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC)
            }
        }
    }

    /// Any thread: an answer arrived from outside the handler call.
    func wakeForHTTPAnswers() {
        table.withLock { table in
            // Under the table lock, as in `update`: the context lives until the table is stopped.
            if table.phase != .stopped { lws_cancel_service(lws.context) }
        }
    }
}

