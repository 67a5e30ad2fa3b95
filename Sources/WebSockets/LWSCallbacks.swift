import CWebSockets
import Dispatch

/// The protocol callback lws calls, on the service thread, for everything on our vhost.
/// A top-level function because `lws_callback_function` must be a C function pointer.
func tabdLWSCallback(
    _ wsi: OpaquePointer?,
    _ reason: lws_callback_reasons,
    _ user: UnsafeMutableRawPointer?,
    _ input: UnsafeMutableRawPointer?,
    _ length: Int
) -> Int32 {
    switch reason {
    case LWS_CALLBACK_WSI_CREATE, LWS_CALLBACK_FILTER_HTTP_CONNECTION, LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION, LWS_CALLBACK_WSI_DESTROY:
        // Connections that never complete a request (a slowloris, a port scan) are counted.
        if let wsi, let contextUser = lws_context_user(lws_get_context(wsi)) {
            Unmanaged<ServiceLoop>.fromOpaque(contextUser).takeUnretainedValue().track(wsi, reason)
        }
        return lws_callback_http_dummy(wsi, reason, user, input, length)
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED, LWS_CALLBACK_HTTP_CONFIRM_UPGRADE, LWS_CALLBACK_HTTP,
        LWS_CALLBACK_HTTP_BODY, LWS_CALLBACK_HTTP_BODY_COMPLETION, LWS_CALLBACK_CLOSED_HTTP,
        LWS_CALLBACK_ESTABLISHED, LWS_CALLBACK_RECEIVE, LWS_CALLBACK_SERVER_WRITEABLE, LWS_CALLBACK_WS_PEER_INITIATED_CLOSE, LWS_CALLBACK_CLOSED:
        // Only these touch the ServiceLoop, so context setup and teardown never do.
        guard let wsi, let contextUser = lws_context_user(lws_get_context(wsi)) else { return -1 }
        let loop = Unmanaged<ServiceLoop>.fromOpaque(contextUser).takeUnretainedValue()
        return loop.handle(wsi, reason, user, input, length)
    default:
        // Plain HTTP and file serving: lws' own handling (404 for missing files).
        return lws_callback_http_dummy(wsi, reason, user, input, length)
    }
}

extension ServiceLoop {
    func handle(
        _ wsi: OpaquePointer,
        _ reason: lws_callback_reasons,
        _ user: UnsafeMutableRawPointer?,
        _ input: UnsafeMutableRawPointer?,
        _ length: Int
    ) -> Int32 {
        switch reason {
        case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
            wake()
            writeArrivedAnswers()
            return 0
        case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
            return confirmUpgrade(wsi, to: input.map { String(cString: $0.assumingMemoryBound(to: CChar.self)) })
        case LWS_CALLBACK_HTTP:
            return answerHTTP(wsi)
        case LWS_CALLBACK_HTTP_BODY:
            // Each returns nil for a connection without an exchange: lws' default handling.
            if let result = receiveBody(wsi, UnsafeRawBufferPointer(start: input, count: input == nil ? 0 : length)) {
                return result
            }
        case LWS_CALLBACK_HTTP_BODY_COMPLETION:
            if let result = completeBody(wsi) { return result }
        case LWS_CALLBACK_CLOSED_HTTP:
            closedHTTP(wsi)
        case LWS_CALLBACK_ESTABLISHED:
            return established(wsi, user)
        case LWS_CALLBACK_RECEIVE:
            guard let session = session(user) else { return -1 }
            return receive(session, UnsafeRawBufferPointer(start: input, count: input == nil ? 0 : length))
        case LWS_CALLBACK_SERVER_WRITEABLE:
            guard let session = session(user) else { return 0 }
            return writeable(session)
        case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
            guard let session = session(user) else { return 0 }
            let payload = UnsafeRawBufferPointer(start: input, count: input == nil ? 0 : length)
            if let (code, reason) = Self.closeProblem(payload) {
                // Not echoed: the close itself breaks the protocol. Our close goes out, the
                // connection is dropped (returning -1 makes lws close without a frame).
                session.localClose = (code, reason)
                Array(reason.utf8).withUnsafeBytes { _ = tabd_fail_connection(wsi, code.rawValue, $0.baseAddress, $0.count) }
                return -1
            }
            session.peerClose = Self.parseClose(payload)
            return 0 // lws echoes the close
        case LWS_CALLBACK_CLOSED:
            closed(user)
            return 0
        default:
            break
        }
        return lws_callback_http_dummy(wsi, reason, user, input, length)
    }

    /// The session whose unretained pointer sits in this connection's lws user area.
    private func session(_ user: UnsafeMutableRawPointer?) -> Session? {
        guard let raw = user?.load(as: UnsafeMutableRawPointer?.self) else { return nil }
        return Unmanaged<Session>.fromOpaque(raw).takeUnretainedValue()
    }

    /// Another thread changed the table: ask lws for the writable callbacks it needs.
    private func wake() {
        let work = table.withLock { $0.takeWakeWork() }
        if work.writableAll {
            lws_callback_on_writable_all_protocol_vhost(lws.vhost, lws.wsProtocol)
        }
        for id in work.writable {
            if let session = sessions[id] { lws_callback_on_writable(session.wsi) }
        }
        for id in work.closing {
            // Its socket may stay choked: drop it if the close frame cannot go out in time.
            if let session = sessions[id] { tabd_lws_kill_after(session.wsi, Self.closeTimeoutSeconds) }
        }
    }

    private func established(_ wsi: OpaquePointer, _ user: UnsafeMutableRawPointer?) -> Int32 {
        let request: UpgradeRequest
        if let last = lastUpgrade, last.wsi == wsi {
            request = last.request
        } else {
            request = upgradeRequest(wsi)
        }
        lastUpgrade = nil
        guard let user, let id = table.withLock({ $0.open() }) else {
            LWS.setCloseReason(wsi, .goingAway, "server stopping")
            return -1
        }
        let session = Session(id: id, wsi: wsi)
        sessions[id] = session
        user.storeBytes(of: Unmanaged.passUnretained(session).toOpaque(), as: UnsafeMutableRawPointer?.self)
        handler.connected(id, request: request)
        return 0
    }

    private func receive(_ session: Session, _ bytes: UnsafeRawBufferPointer) -> Int32 {
        // Closing already: lws has sent our close frame and waits for the peer's. Discard
        // what still arrives; failing the connection here would reset the socket, and the
        // peer would lose our close frame (it would see 1006 instead of our code).
        guard session.localClose == nil else { return 0 }
        let wsi = session.wsi
        if lws_frame_is_binary(wsi) != 0 {
            return closeNow(session, .unsupportedData, "binary frames are not supported")
        }
        let final = lws_is_final_fragment(wsi) != 0
        if let dropped = session.oversized ?? (session.message.count + bytes.count > configuration.maxMessageBytes ? 0 : nil) {
            // Too big: throw it away as it arrives and close with 1009 once the peer has
            // sent all of it. Closing mid-message would reset the socket while the peer is
            // still writing, and it would never read our close frame. A peer that goes on
            // past 1 MiB more is closed at once.
            session.message = []
            session.oversized = dropped + bytes.count
            guard final || dropped + bytes.count > Self.oversizedDiscardLimit else { return 0 }
            return closeNow(session, .messageTooBig, "message too big")
        }
        if final && session.message.isEmpty {
            handler.received(session.id, message: Array(bytes))
        } else {
            session.message.append(contentsOf: bytes)
            if final {
                let message = session.message
                session.message = []
                handler.received(session.id, message: message)
            }
        }
        return 0
    }

    /// How much of an oversized message is read and dropped before closing anyway.
    static let oversizedDiscardLimit = 1 << 20

    /// Sets the close code and makes lws close the connection (return the result from the callback).
    private func closeNow(_ session: Session, _ code: CloseCode, _ reason: String) -> Int32 {
        session.localClose = (code, reason)
        LWS.setCloseReason(session.wsi, code, reason)
        return -1
    }

    /// Writes what the table has for this connection, several frames per system call.
    private func writeable(_ session: Session) -> Int32 {
        if session.localClose != nil { return -1 }
        let wsi = session.wsi
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
                return closeNow(session, code, reason)
            case let .frames(more):
                guard write(frames, to: wsi) else { return -1 }
                guard more else { return 0 }
                writes += 1
                if writes >= Self.maxWritesPerCallback || lws_partial_buffered(wsi) != 0
                    || lws_send_pipe_choked(wsi) != 0
                {
                    lws_callback_on_writable(wsi)
                    return 0
                }
            }
        }
    }

    /// One `lws_write` for the whole batch: the frames are pre-framed, so they are written raw,
    /// straight from the shared storage when there is one, else gathered into `scratch`.
    private func write(_ frames: [OutgoingFrame], to wsi: OpaquePointer) -> Bool {
        if frames.count == 1 {
            return frames[0].wire.withUnsafeBytes { tabd_lws_write_raw(wsi, $0.baseAddress, $0.count) } >= 0
        }
        var offset = 0
        for frame in frames {
            frame.wire.withUnsafeBytes { bytes in
                // takeOutput keeps a batch of several frames within writeBudget == scratch.count.
                scratch.baseAddress!.advanced(by: offset).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
            }
            offset += frame.wire.count
        }
        return tabd_lws_write_raw(wsi, scratch.baseAddress, offset) >= 0
    }

    private func closed(_ user: UnsafeMutableRawPointer?) {
        guard let user, let session = session(user) else { return }
        // A connection lws failed and closed before a sweep saw it (the peer answered its
        // close at once): the handler still hears lws' code.
        if let (code, reason) = closingByLWS(session) { recordClose(session, code: code, reason: reason) }
        user.storeBytes(of: nil, as: UnsafeMutableRawPointer?.self)
        sessions[session.id] = nil
        let decided = table.withLock { $0.remove(session.id) }
        let code: CloseCode?
        let reason: String
        if let local = session.localClose ?? decided {
            (code, reason) = (local.code, local.reason)
        } else if let peer = session.peerClose {
            (code, reason) = (peer.code, peer.reason)
        } else {
            (code, reason) = (nil, "connection lost")
        }
        handler.disconnected(session.id, code: code, reason: reason)
    }

    /// What is wrong with a peer's close payload (RFC 6455 5.5.1, 7.4): a body of one byte, a
    /// code that must not be sent (0-999, 1004-1006, 1015, 1016-2999, 5000 and up), or a reason
    /// that is not UTF-8. nil when it is a valid close.
    static func closeProblem(_ payload: UnsafeRawBufferPointer) -> (CloseCode, String)? {
        if payload.isEmpty { return nil }
        guard payload.count >= 2 else { return (.protocolError, "a close body of one byte") }
        let code = UInt16(payload[0]) << 8 | UInt16(payload[1])
        switch code {
        case 1000...1003, 1007...1014, 3000...4999: break
        default: return (.protocolError, "close code \(code) is not allowed")
        }
        guard String(validating: payload[2...], as: UTF8.self) != nil else { return (.invalidPayload, "close reason is not UTF-8") }
        return nil
    }

    /// A connection lws is closing though neither side asked to: lws failed it for a
    /// protocol error (reserved bits or opcodes, a fragmented control frame, a stray
    /// continuation, invalid UTF-8) and prepared its close frame. nil for any other.
    func closingByLWS(_ session: Session) -> (code: UInt16, reason: [UInt8])? {
        guard session.localClose == nil, session.peerClose == nil else { return nil }
        var bytes: UnsafePointer<UInt8>?
        let count = tabd_lws_close_payload(session.wsi, &bytes)
        guard count >= 2, let bytes else { return nil }
        return (UInt16(bytes[0]) << 8 | UInt16(bytes[1]), Array(UnsafeBufferPointer(start: bytes + 2, count: count - 2)))
    }

    /// Records lws' close as this side's (the handler hears its code and reason).
    func recordClose(_ session: Session, code: UInt16, reason: [UInt8]) {
        let text = String(decoding: reason, as: UTF8.self)
        session.localClose = (CloseCode(rawValue: code) ?? .protocolError, text.isEmpty ? "protocol error" : text)
    }

    /// Runs after service passes, at most every ``failSweepNanoseconds`` (a timer wakes the
    /// service thread that often). lws sends its close frame for a connection it failed
    /// and then waits up to 5 s for a peer that broke the protocol to answer; RFC 6455
    /// 7.1.7 says to drop the connection instead. A connection seen closing by lws on two
    /// sweeps in a row (its close frame is out by then) is shut down: the peer reads the
    /// close, then the end of the stream, and lws lets the socket go at once.
    func sweepFailedConnections() {
        let now = DispatchTime.now().uptimeNanoseconds
        guard now &- lastFailSweep >= Self.failSweepNanoseconds else { return }
        lastFailSweep = now
        for session in sessions.values {
            guard let (code, reason) = closingByLWS(session) else { continue }
            guard session.seenClosingByLWS, lws_partial_buffered(session.wsi) == 0 else {
                session.seenClosingByLWS = true
                continue
            }
            recordClose(session, code: code, reason: reason)
            tabd_drop_connection(session.wsi)
        }
    }

    /// Follows each connection until its first request is complete: one that ends before
    /// (lws drops a connection whose request has not arrived after
    /// `Configuration.requestTimeoutSeconds`, or the peer went) is counted.
    func track(_ wsi: OpaquePointer, _ reason: lws_callback_reasons) {
        switch reason {
        case LWS_CALLBACK_WSI_CREATE:
            awaitingRequest.insert(wsi)
        case LWS_CALLBACK_FILTER_HTTP_CONNECTION, LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
            awaitingRequest.remove(wsi)
        default: // destroyed
            if awaitingRequest.remove(wsi) != nil { incompleteRequests.add(1, ordering: .relaxed) }
        }
    }

    /// A peer's close as the handler hears it: a code this server knows, and a reason.
    static func parseClose(_ payload: UnsafeRawBufferPointer) -> (code: CloseCode?, reason: String) {
        let (raw, text) = LWS.parseClose(payload)
        guard let raw else { return (nil, "closed by peer") }
        return (CloseCode(rawValue: raw), text.isEmpty ? "closed by peer (\(raw))" : text)
    }
}
