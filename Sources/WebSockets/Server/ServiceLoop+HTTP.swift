import CWebSockets
import FoundationEssentials
import Glibc
import Dispatch
import Portable

/// HTTP/1.1 on a connection: its requests read one at a time, in order, each answered before
/// the next is looked at (so any number of requests in one packet, with or without bodies,
/// are answered in the order they came), then the next read from what is already buffered.
///
/// A request's head must arrive within `Configuration.requestTimeoutSeconds` of the
/// connection's start or of the previous answer, and its body within as long again after
/// the head (else 408). A malformed head, an untrustworthy body framing or a bad chunk is
/// answered with its error and the connection closed (where the next request starts can no
/// longer be known). While the handler has an answer to give, or an answer is not all
/// written (ServiceLoop+Answers.swift), what arrives is kept (up to `maxUnreadInput`, then
/// reading pauses) and not read: a client that does not read its answers is not answered
/// ahead.
extension ServiceLoop {
    /// Reads as many requests from the connection's unread bytes as can be answered now.
    func readRequests(_ connection: Connection) {
        while connection.phase == .http && !connection.killed {
            switch connection.http.stage {
            case .head:
                guard !connection.input.isEmpty else { return }
                // A client that sends requests without reading the answers gets no more read
                // until its answer is written and no longer counted (`httpWriteable` goes on).
                if connection.answer != nil || connection.answerHeld > 0 || lws_partial_buffered(connection.wsi) != 0 {
                    setReading(connection, paused: true)
                    lws_callback_on_writable(connection.wsi)
                    if !connection.waitingForOutput {
                        // Not the client's request timeout: it is waiting for us. But a client
                        // that takes nothing for this long is gone.
                        connection.waitingForOutput = true
                        setDeadline(connection, after: Self.stalledOutputSeconds)
                    }
                    return
                }
                let parsed: (head: RequestHead, length: Int)?
                do {
                    parsed = try connection.input.withUnread { (bytes) throws(HTTPError) in try connection.http.parser.parse(bytes) }
                } catch {
                    refuse(connection, error)
                    return
                }
                guard let (head, length) = parsed else { return }
                connection.input.consume(length)
                connection.http.parser.reset()
                connection.sawRequest = true
                route(connection, head)
            case let .body(request):
                do {
                    let limit = configuration.maxRequestBodyBytes
                    let taken = try connection.input.withUnread { (bytes) throws(HTTPError) in
                        try request.reader.read(bytes) { piece in
                            guard case .handler = request.route, !request.tooLarge else { return }
                            if request.body.count + piece.count > limit {
                                request.tooLarge = true
                                request.body = []
                            } else {
                                request.body.append(contentsOf: piece)
                            }
                        }
                    }
                    connection.input.consume(taken)
                } catch {
                    refuse(connection, error)
                    return
                }
                if request.tooLarge {
                    // Only a chunked body gets here (a known length is refused from the head):
                    // its end is not known, so the connection closes after the answer.
                    request.closeAfter = true
                    answer(connection, request)
                    continue
                }
                guard request.reader.isDone else { return }
                answer(connection, request)
            case .answering:
                return
            case .streaming:
                // A reader of a stream has nothing more to say: what it sends is dropped.
                connection.input.consume(connection.input.count)
                return
            case var .discarding(reader):
                do {
                    let taken = try connection.input.withUnread { (bytes) throws(HTTPError) in try reader.read(bytes) { _ in } }
                    connection.input.consume(taken)
                } catch {
                    refuse(connection, error)
                    return
                }
                guard reader.isDone else {
                    connection.http.stage = .discarding(reader)
                    return
                }
                connection.http.stage = .head
                setDeadline(connection, after: UInt64(configuration.requestTimeoutSeconds))
            case .done:
                return
            }
        }
    }

    /// A whole head: decides who answers, and how the body is read.
    private func route(_ connection: Connection, _ head: RequestHead) {
        let framing: BodyFraming
        let target: RequestTarget
        do throws(HTTPError) {
            try head.checkHost()
            framing = try head.bodyFraming()
            // CONNECT and TRACE among them; a method is looked at before its target.
            guard HTTPMethod(rawValue: head.method) != nil else {
                throw HTTPError(501, "method \(head.method.prefix(32)) is not implemented")
            }
            target = try RequestTarget(head.target)
        } catch {
            refuse(connection, error)
            return
        }
        if connection.plainOnTLSPort {
            refusePlainHTTP(connection, head)
            return
        }
        let isUpgrade = head.tokens("upgrade").contains("websocket")
        let refusal = handler.screen(RequestSummary(
            method: head.method, path: target.path, isUpgrade: isUpgrade, host: head.value("host"), origin: head.value("origin"),
            peer: peerAddress(connection), forwarding: ForwardingHeaders(head)))
        if isUpgrade && refusal == nil {
            upgrade(connection, head, target, framing)
            return
        }
        let expectsContinue = head.tokens("expect").contains("100-continue")
        let method = HTTPMethod(rawValue: head.method)
        let route: HTTPRequestInProgress.Route
        if let refusal {
            // Refused by the handler before anything else: answered as a file would be.
            route = .local(refusal)
        } else if let method, isDynamic(target.path) {
            route = .handler(method)
        } else if method == .get || method == .head {
            let conditions = StaticFiles.Conditions(origin: head.value("origin"), ifNoneMatch: head.value("if-none-match"),
                                                    acceptsGzip: StaticFiles.Conditions.acceptsGzip(head.tokens("accept-encoding")),
                                                    version: target.query["v"])
            route = .local(files?.response(for: target.path, conditions) ?? StaticFiles.notFound)
        } else if method == .options, let files, StaticFiles.isModule(target.path) {
            route = .local(files.preflight(path: target.path, origin: head.value("origin")))
        } else {
            route = .local(HTTPResponse(status: 405, text: "405 Method Not Allowed\n", headers: [("allow", "GET, HEAD")]))
        }
        let request = HTTPRequestInProgress(
            head: head, target: target, route: route, reader: BodyReader(framing), closeAfter: !head.keepsAlive || isUpgrade,
            expectsContinue: expectsContinue)
        switch (route, framing) {
        case (_, .none), (_, .length(0)):
            answer(connection, request)
        case (.handler, .length(let length)) where length > configuration.maxRequestBodyBytes:
            // Known from the head: the handler hears of it at once; no byte of it is kept.
            request.tooLarge = true
            if length > Self.bodyDiscardLimit || expectsContinue { request.closeAfter = true }
            answer(connection, request)
        case (.handler, _):
            if expectsContinue { write(ResponseBytes.continue, to: connection) }
            connection.http.stage = .body(request)
            setDeadline(connection, after: UInt64(configuration.requestTimeoutSeconds))
        case (.local, .length(let length)) where length <= Self.bodyDiscardLimit && !expectsContinue:
            // Read and dropped, then answered: the connection goes on.
            connection.http.stage = .body(request)
            setDeadline(connection, after: UInt64(configuration.requestTimeoutSeconds))
        case (.local, _):
            request.closeAfter = true
            answer(connection, request)
        }
    }

    /// Answers a request: the server's own answer now, or the handler's when it gives one.
    private func answer(_ connection: Connection, _ request: HTTPRequestInProgress) {
        connection.http.stage = .answering(request)
        connection.deadline = 0  // the answer may take as long as the handler needs
        switch request.route {
        case let .local(response):
            finish(connection, request, response)
        case let .handler(method):
            let id = http.open(socket: connection.socket)
            request.exchangeID = id
            let body = request.tooLarge ? [] : request.body
            request.body = []
            handler.httpRequest(
                HTTPRequest(method: method, path: request.target.path, query: request.target.query,
                            authorization: request.head.value("authorization"), body: body, bodyTooLarge: request.tooLarge,
                            lastEventID: request.head.value("last-event-id")),
                responder: HTTPResponder(exchanges: http, id: id, loop: self))
            if let response = http.endHandling(id) { finish(connection, request, response) }
        }
    }

    /// Writes a request's answer and moves to what comes next: the rest of a refused body,
    /// the next request, or the end of the connection.
    func finish(_ connection: Connection, _ request: HTTPRequestInProgress, _ response: HTTPResponse) {
        if let stream = response.stream, !request.isHead, !connection.killed {
            return startStream(connection, request, response, stream)
        }
        if let id = request.exchangeID { http.remove(id) }
        request.exchangeID = nil
        var closeAfter = request.closeAfter || connection.killed
        let unread = request.reader.remainingLength ?? 0
        if request.tooLarge && !request.reader.isDone && (unread > Self.bodyDiscardLimit || request.reader.remainingLength == nil) {
            closeAfter = true
        }
        let persistence: ResponseBytes.Persistence =
            closeAfter ? .close : request.head.minorVersion == 0 ? .keepAliveHTTP10 : .keepAlive
        sendAnswer(response, headOnly: request.isHead, persistence: persistence, to: connection)
        setReading(connection, paused: false)
        if closeAfter {
            connection.http.stage = .done
            closeAfterFlush(connection)
        } else if !request.reader.isDone {
            connection.http.stage = .discarding(request.reader)
            setDeadline(connection, after: UInt64(configuration.requestTimeoutSeconds))
        } else {
            connection.http.stage = .head
            setDeadline(connection, after: UInt64(configuration.requestTimeoutSeconds))
        }
    }

    /// Answers a request that cannot be served with its error, and closes the connection.
    /// A plain-HTTP request to a TLS server: nothing is served in plain text. A GET or HEAD
    /// (a WebSocket upgrade included) is sent to the same host and path over https; anything
    /// else is refused. The connection closes after the answer.
    private func refusePlainHTTP(_ connection: Connection, _ head: RequestHead) {
        let host = head.value("host") ?? ""
        let hostIsPlain = !host.isEmpty && host.utf8.count <= 255
            && host.unicodeScalars.allSatisfy { $0.isASCII && ((($0.value >= 0x30 && $0.value <= 0x39) || ($0.value >= 0x41 && $0.value <= 0x5a) || ($0.value >= 0x61 && $0.value <= 0x7a)) || ".-:[]".unicodeScalars.contains($0)) }
        guard (head.method == "GET" || head.method == "HEAD"), hostIsPlain, head.target.hasPrefix("/") else {
            refuse(connection, HTTPError(400, "this port speaks HTTPS only"))
            return
        }
        let location = "https://\(host)\(head.target)"
        refuse(connection, HTTPError(301, "this port speaks HTTPS only: \(location)"), headers: [("Location", location)])
    }

    func refuse(_ connection: Connection, _ error: HTTPError, headers: [(String, String)] = []) {
        let text = "\(error.status) \(ResponseBytes.reasonPhrase(error.status)): \(error.message)\n"
        sendAnswer(HTTPResponse(status: error.status, text: text, headers: headers), headOnly: false, persistence: .close, to: connection)
        connection.http.stage = .done
        closeAfterFlush(connection)
    }

    /// The request timeout passed (no deadline is set while an answer is awaited).
    func httpDeadlinePassed(_ connection: Connection) {
        if connection.waitingForOutput {
            // It took none of its answers for `stalledOutputSeconds`: nothing more can be said.
            kill(connection)
            return
        }
        switch connection.http.stage {
        case .head:
            if connection.http.parser.hasStarted || !connection.input.isEmpty {
                refuse(connection, HTTPError(408, "the request did not arrive within \(configuration.requestTimeoutSeconds) s"))
            } else {
                // Idle (a new connection that sent nothing, or keep-alive after an answer).
                connection.http.stage = .done
                closeAfterFlush(connection)
            }
        case .body:
            refuse(connection, HTTPError(408, "the body did not arrive within \(configuration.requestTimeoutSeconds) s"))
        case let .streaming(stream):
            // Quiet for a while: a comment keeps proxies from closing it, and a peer that is
            // gone shows as a failed write.
            stream.heartbeat()
            setDeadline(connection, after: Self.streamHeartbeatSeconds)
        case .discarding:
            connection.http.stage = .done
            closeAfterFlush(connection)
        case .answering, .done:
            break
        }
    }

    /// Writes the answers that arrived from other threads since the last wake-up, then reads
    /// the requests that were waiting behind them.
    func writeArrivedAnswers() {
        for (id, socket) in http.takeReady() {
            guard let connection = connections[socket], case let .answering(request) = connection.http.stage,
                request.exchangeID == id, let response = http.answer(for: id)
            else { continue }
            finish(connection, request, response)
            readRequests(connection)
        }
    }

    /// LWS_CALLBACK_RAW_WRITEABLE while it speaks HTTP: more of its answer goes out; once it is
    /// all written, the requests waiting behind it are read.
    func httpWriteable(_ connection: Connection) {
        guard writeAnswer(connection) else { return }
        if case .streaming = connection.http.stage { return pumpStream(connection) }
        guard case .head = connection.http.stage else { return }
        if connection.waitingForOutput {
            connection.waitingForOutput = false
            setDeadline(connection, after: UInt64(configuration.requestTimeoutSeconds))
        }
        setReading(connection, paused: false)
        readRequests(connection)
    }

    /// Whether `path` goes to the handler.
    func isDynamic(_ path: String) -> Bool {
        dynamicPaths.contains(path) || configuration.dynamicPrefixes.contains { path.hasPrefix($0) }
    }
}

// MARK: Streamed bodies

extension ServiceLoop {
    /// Seconds a stream may stay quiet before a heartbeat comment goes out.
    static let streamHeartbeatSeconds: UInt64 = 15

    /// The answer is a stream: its head now, then what it is sent, as the socket takes it.
    private func startStream(_ connection: Connection, _ request: HTTPRequestInProgress, _ response: HTTPResponse, _ stream: HTTPStream) {
        if let id = request.exchangeID { http.remove(id, started: true) }
        request.exchangeID = nil
        connection.http.stage = .streaming(stream)
        let (head, _) = ResponseBytes.parts(response, headOnly: true, persistence: .close, streamed: true)
        connection.answer = AnswerOutput(head: head, body: [], joinBelow: Self.writeBudget)
        setReading(connection, paused: false)
        setDeadline(connection, after: Self.streamHeartbeatSeconds)
        let socket = connection.socket
        let ready = stream.attach { [weak self] in self?.wakeForStream(socket) }
        if writeAnswer(connection), ready { pumpStream(connection) }
    }

    /// Any thread: the stream of `socket` has something for the service thread.
    func wakeForStream(_ socket: UInt64) {
        streamsReady.withLock { $0.append(socket) }
        wakeForHTTPAnswers()
    }

    /// Writes what the streams woken since the last pass have.
    func pumpReadyStreams() {
        let sockets = streamsReady.withLock { ready -> [UInt64] in
            defer { ready = [] }
            return ready
        }
        for socket in sockets {
            if let connection = connections[socket] { pumpStream(connection) }
        }
    }

    /// Hands the stream's queued bytes to the socket, once what it took before is written;
    /// ends the connection at the stream's end.
    func pumpStream(_ connection: Connection) {
        while case let .streaming(stream) = connection.http.stage, !connection.killed,
              connection.answer == nil, lws_partial_buffered(connection.wsi) == 0 {
            switch stream.take() {
            case let .bytes(bytes):
                guard !bytes.isEmpty else { return }
                connection.answer = AnswerOutput(head: bytes, body: [], joinBelow: Self.writeBudget)
                guard writeAnswer(connection) else { return } // the writable callback comes back here
            case .end:
                connection.http.stage = .done
                closeAfterFlush(connection)
                return
            case .drop:
                connection.http.stage = .done
                kill(connection)
                return
            }
        }
    }
}
