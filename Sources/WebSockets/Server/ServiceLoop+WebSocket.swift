import CWebSockets
import WebSocketEngine
import Portable

/// WebSocket on a connection: the opening handshake (RFC 6455 §4.2), frames in through
/// `FrameDecoder`, frames out from the connection table, pings, and the closing handshake.
///
/// Closing. A peer's close is echoed with its code, then the connection is shut (the peer
/// reads the echo, then the end of the stream). A peer that breaks the protocol gets a close
/// with the reason (1002, 1003, 1007, 1009) and is shut at once, without waiting for its
/// answer (RFC 6455 §7.1.7). A close this side decides (the table's: 1001, 1008, 4404, ...)
/// waits up to `closeTimeoutSeconds` for the peer's, then drops it.
extension ServiceLoop {
    // MARK: The handshake

    func upgrade(_ connection: Connection, _ head: RequestHead, _ target: RequestTarget, _ framing: BodyFraming) {
        func refuse(_ status: Int, _ message: String, headers: [(String, String)] = []) {
            self.refuse(connection, HTTPError(status, message), headers: headers)
        }
        guard head.method == "GET" else { return refuse(400, "a WebSocket upgrade must be a GET") }
        guard target.path == configuration.webSocketPath else { return refuse(404, "no WebSocket at \(target.path.prefix(64))") }
        guard head.minorVersion == 1 else { return refuse(400, "a WebSocket upgrade needs HTTP/1.1") }
        guard head.tokens("connection").contains("upgrade") else { return refuse(400, "connection: upgrade is missing") }
        guard head.value("sec-websocket-version") == "13" else {
            return refuse(426, "only WebSocket version 13 is spoken", headers: [("sec-websocket-version", "13")])
        }
        guard let key = head.value("sec-websocket-key"), HandshakeKey.isValidKey(key) else {
            return refuse(400, "sec-websocket-key must be 16 bytes in base64")
        }
        guard framing == .none || framing == .length(0) else { return refuse(400, "a WebSocket upgrade has no body") }
        let offered = head.values("sec-websocket-protocol").flatMap { $0.split(separator: ",") }
            .map { $0.trimmingWhitespace }.filter { !$0.isEmpty }
        if !offered.isEmpty && !offered.contains(configuration.subprotocol) {
            return refuse(400, "unsupported subprotocol; use \(configuration.subprotocol)")
        }
        guard table.withLock({ $0.phase == .running }) else { return refuse(503, "the server is stopping") }
        let request = UpgradeRequest(
            path: target.path, query: target.query, origin: head.value("origin"), host: head.value("host"),
            authorization: head.value("authorization"), subprotocol: offered.isEmpty ? nil : configuration.subprotocol,
            offeredSubprotocols: offered, peer: peerAddress(connection),
            forwarding: ForwardingHeaders(head))
        if case let .reject(status) = handler.shouldAccept(request) {
            return refuse(status, ResponseBytes.reasonPhrase(status))
        }
        guard let id = table.withLock({ $0.open() }) else { return refuse(503, "the server is stopping") }
        var answer = "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
        answer += "sec-websocket-accept: \(HandshakeKey.accept(for: key))\r\n"
        if request.subprotocol != nil { answer += "sec-websocket-protocol: \(configuration.subprotocol)\r\n" }
        let now = Self.now()
        let session = WebSocketSession(
            id: id,
            decoder: FrameDecoder(options: .init(maxMessageBytes: configuration.maxMessageBytes, expectsMaskedFrames: true,
                                                 acceptsBinary: false)),
            now: now)
        // The 101 goes out with the first frame (the welcome, normally): one write, not two.
        session.handshake = Array((answer + "\r\n").utf8)
        connection.session = session
        connection.phase = .webSocket
        connection.http = HTTPState(stage: .done)
        sessions[id] = connection
        setDeadline(connection, after: UInt64(configuration.pingIntervalSeconds), now: now)
        handler.connected(id, request: request)
        // Frames the client sent right behind its upgrade request.
        var early = InputBuffer()
        swap(&early, &connection.input)
        try? early.withUnread { (bytes) throws(HTTPError) in webSocketReceived(connection, bytes) }
        setReading(connection, paused: false)
    }

    func peerAddress(_ connection: Connection) -> String {
        var buffer = [CChar](repeating: 0, count: 64)
        guard lws_get_peer_simple(connection.wsi, &buffer, buffer.count) != nil else { return "" }
        return String(nulTerminated: buffer)
    }

    // MARK: Frames in

    func webSocketReceived(_ connection: Connection, _ bytes: UnsafeRawBufferPointer) {
        guard let session = connection.session, !bytes.isEmpty else { return }
        session.lastHeard = Self.now()
        session.pingSent = false
        session.events.removeAll(keepingCapacity: true)
        session.decoder.decode(bytes, into: &session.events)
        for event in session.events {
            switch event {
            case let .message(message, _):
                // Closing already: what still arrives is dropped (RFC 6455 §5.5.1).
                if session.localClose == nil && !session.closeAfterControl {
                    handler.received(session.id, message: message)
                }
            case let .ping(payload):
                guard session.localClose == nil, !session.closeAfterControl else { continue }
                // Only the latest ping needs its pong (RFC 6455 §5.5.3): a flood queues one.
                session.control.removeAll { $0.first == 0x8A }
                session.control.append(ControlFrame.pong(payload))
                lws_callback_on_writable(connection.wsi)
            case .pong:
                break
            case let .close(code, reason):
                if session.localClose != nil {
                    // The answer to this side's close: the closing handshake is done.
                    closeAfterFlush(connection)
                } else if !session.closeAfterControl {
                    session.peerClose = (code.flatMap(CloseCode.init(rawValue:)),
                                         code == nil ? "closed by peer" : reason.isEmpty ? "closed by peer (\(code!))" : reason)
                    session.control = [ControlFrame.close(code, reason: reason)]
                    session.closeAfterControl = true
                    lws_callback_on_writable(connection.wsi)
                }
            case let .failure(code, reason):
                guard session.localClose == nil, !session.closeAfterControl else {
                    closeAfterFlush(connection)
                    continue
                }
                session.localClose = (code, reason)
                session.control = [ControlFrame.close(code.rawValue, reason: reason)]
                session.closeAfterControl = true
                lws_callback_on_writable(connection.wsi)
            }
        }
        // Keeps its storage, not the messages (an idle connection holds no bytes of its past).
        session.events.removeAll(keepingCapacity: true)
    }

    // MARK: Frames out

    /// LWS_CALLBACK_RAW_WRITEABLE of a WebSocket: control frames first, then what the table
    /// has for it, several frames per system call.
    func webSocketWriteable(_ connection: Connection) -> Int32 {
        guard let session = connection.session else { return -1 }
        // lws still holds bytes for it (a write outside this callback left a tail): it writes
        // those first, then calls back.
        if lws_partial_buffered(connection.wsi) != 0 {
            lws_callback_on_writable(connection.wsi)
            return 0
        }
        if session.blocked {
            // It took what was left: it reads again.
            session.blocked = false
            update { $0.setBlocked(session.id, false) }
        }
        if !session.control.isEmpty {
            for frame in session.control { writeFrames([], then: frame, to: connection) }
            session.control.removeAll()
        }
        if session.closeAfterControl {
            closeAfterFlush(connection)
            return 0
        }
        // This side's close is out: nothing more is written.
        if session.localClose != nil { return 0 }
        var writes = 0
        while true {
            var frames = batch
            batch = []
            frames.removeAll(keepingCapacity: true)
            let output = table.withLock { $0.takeOutput(session.id, maxBytes: Self.writeBudget, into: &frames) }
            defer { batch = frames }
            switch output {
            case .unknown:
                return -1
            case .idle:
                return 0
            case let .close(code, reason):
                session.localClose = (code, reason)
                writeFrames([], then: ControlFrame.close(code.rawValue, reason: reason), to: connection)
                setDeadline(connection, after: Self.closeTimeoutSeconds)
                return 0
            case let .frames(more):
                guard writeFrames(frames, to: connection) else { return -1 }
                let buffered = lws_partial_buffered(connection.wsi) != 0
                if buffered || (more && lws_send_pipe_choked(connection.wsi) != 0) {
                    // The socket takes no more: what is left waits in the table (and lws
                    // holds the tail of this write), counted toward the bounds on bytes.
                    let inFlight = buffered ? frames.reduce(0) { $0 + $1.wire.count } : 0
                    session.blocked = true
                    update { $0.setBlocked(session.id, true, inFlight: inFlight) }
                    lws_callback_on_writable(connection.wsi)
                    return 0
                }
                guard more else { return 0 }
                writes += 1
                if writes >= Self.maxWritesPerCallback {
                    lws_callback_on_writable(connection.wsi)
                    return 0
                }
            }
        }
    }

    /// One write for the whole batch: the frames are pre-framed, written straight from the
    /// shared storage when there is one, else gathered into `scratch`; a handshake answer still
    /// owed goes in front, and `then` (a control frame) after them.
    @discardableResult
    private func writeFrames(_ frames: [OutgoingFrame], then control: [UInt8] = [], to connection: Connection) -> Bool {
        if let handshake = connection.session?.handshake {
            connection.session?.handshake = nil
            var bytes = handshake
            for frame in frames { bytes += frame.wire }
            return write(bytes + control, to: connection)
        }
        if frames.isEmpty { return write(control, to: connection) }
        if frames.count == 1 {
            return frames[0].wire.withUnsafeBytes { tabd_lws_write_raw(connection.wsi, $0.baseAddress, $0.count) } >= 0
        }
        var offset = 0
        for frame in frames {
            frame.wire.withUnsafeBytes { bytes in
                // takeOutput keeps a batch of several frames within writeBudget == scratch.count.
                scratch.baseAddress!.advanced(by: offset).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
            }
            offset += frame.wire.count
        }
        return tabd_lws_write_raw(connection.wsi, scratch.baseAddress, offset) >= 0
    }

    // MARK: Time

    /// A WebSocket's deadline: closing, its time to answer is up; open, a ping is due or the
    /// peer has been silent too long.
    func webSocketDeadlinePassed(_ connection: Connection, now: UInt64) {
        guard let session = connection.session else { return }
        if session.localClose != nil || session.closeAfterControl || table.withLock({ $0.isClosing(session.id) }) {
            kill(connection)
            return
        }
        let silent = now &- session.lastHeard
        let ping = UInt64(configuration.pingIntervalSeconds) * 1_000_000_000
        let hangup = UInt64(configuration.hangupSeconds) * 1_000_000_000
        if silent >= hangup {
            session.dropReason = "connection lost (no answer to ping within \(configuration.hangupSeconds) s)"
            kill(connection)
        } else if silent >= ping {
            if !session.pingSent {
                session.pingSent = true
                session.control.append(ControlFrame.ping())
                lws_callback_on_writable(connection.wsi)
            }
            let deadline = session.lastHeard + hangup
            connection.deadline = deadline
            timers.schedule(connection.socket, at: deadline)
        } else {
            let deadline = session.lastHeard + ping
            connection.deadline = deadline
            timers.schedule(connection.socket, at: deadline)
        }
    }
}
