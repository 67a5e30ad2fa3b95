import CNATS
import Dispatch
import Glibc
import Locking
import Synchronization

/// One connection to the engine (NATS with JetStream), through libnats: streams,
/// compare-and-set publishes, ordered consumers, core publish/subscribe. The only code
/// in tabd that touches the C client.
///
/// Thread-safe: libnats' connection and JetStream context may be used from any thread.
/// Callbacks (subscriptions, connection changes) run on libnats' threads and must be quick.
public final class EngineClient: @unchecked Sendable {
    // @unchecked: the pointers are libnats' thread-safe objects, set once in init and
    // released once in close(), guarded by `closed`.
    let connection: OpaquePointer
    let js: OpaquePointer
    private let closed = Atomic<Bool>(false)
    /// Held while the connection is read from off libnats' calls (``connectedServer()``)
    /// and while ``close()`` destroys it.
    private let destroying = Locked(())
    /// Calls in progress through ``whileOpen(_:)``: ``close()`` destroys the connection only
    /// once none is left.
    private let users = Locked(0)
    private let status: StatusBox
    /// Asynchronous publishes waiting for their answer, by message id.
    private let pending: PendingAcks

    /// Connects to any of `urls` (reconnecting forever to any of them afterwards), over TLS
    /// and with credentials as `security` says. `onChange` hears `true` on every
    /// (re)connect and `false` on every disconnect. A failure says libnats' reason (its
    /// TLS error, "Authorization Violation") and how the connection was made.
    ///
    /// `onGiveUp` hears libnats' reason if it closes the connection by itself, for good: it
    /// does when a server answers with an error it does not know, and (libnats 3.4) once a
    /// server refused the credentials twice in a row while it reconnected (they were
    /// changed on the servers), even if the servers would take them again later.
    public init(urls: [String], name: String, security: EngineSecurity = EngineSecurity(), timeoutMs: Int64 = 2000,
                onChange: @escaping @Sendable (Bool) -> Void = { _ in },
                onGiveUp: @escaping @Sendable (String) -> Void = { _ in }) throws(EngineError) {
        var opts: OpaquePointer?
        var s = natsOptions_Create(&opts)
        guard s == NATS_OK, let opts else { throw EngineError(s, jsErrCode(rawValue: 0), "cannot create NATS options") }
        defer { natsOptions_Destroy(opts) }
        let cStrings = urls.map { strdup($0) }
        defer { cStrings.forEach { free($0) } }
        var pointers = cStrings.map { UnsafePointer<CChar>($0) }
        s = pointers.withUnsafeMutableBufferPointer { natsOptions_SetServers(opts, $0.baseAddress, Int32(urls.count)) }
        guard s == NATS_OK else { throw EngineError(s, jsErrCode(rawValue: 0), "bad NATS URL in \(EngineURL.redacted(urls))") }
        try Self.apply(security, urls: urls, to: opts)
        natsOptions_SetName(opts, name)
        natsOptions_SetTimeout(opts, timeoutMs)
        natsOptions_SetAllowReconnect(opts, true)
        natsOptions_SetMaxReconnect(opts, -1)
        natsOptions_SetReconnectWait(opts, 250)
        // A request in flight when the connection drops (its server stopped) fails at once
        // instead of waiting out its timeout: publishes are asked again right away.
        natsOptions_SetFailRequestsOnDisconnect(opts, true)
        // Each subscription has its own delivery thread (libnats' default): a node follows a
        // few shards and hears a few core subjects, whatever its rooms, so its threads do not
        // grow with them. (libnats' shared delivery pool would save those few threads; it
        // is not needed for the bound, so a node does without it.)
        let status = StatusBox(changed: onChange, gaveUp: onGiveUp)
        let box = Unmanaged.passRetained(status)
        natsOptions_SetDisconnectedCB(opts, { _, closure in
            Unmanaged<StatusBox>.fromOpaque(closure!).takeUnretainedValue().changed(false)
        }, box.toOpaque())
        natsOptions_SetReconnectedCB(opts, { _, closure in
            Unmanaged<StatusBox>.fromOpaque(closure!).takeUnretainedValue().changed(true)
        }, box.toOpaque())
        // The last callback libnats makes for a connection: the box can go then (not in
        // close(), when a disconnected callback may still be on its way).
        natsOptions_SetClosedCB(opts, { nc, closure in
            let box = Unmanaged<StatusBox>.fromOpaque(closure!).takeRetainedValue()
            guard !box.closing.load(ordering: .acquiring), let nc else { return }
            var text: UnsafePointer<CChar>?
            let s = natsConnection_GetLastError(nc, &text)
            box.gaveUp(text.map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 } ?? String(cString: natsStatus_GetText(s)))
        }, box.toOpaque())
        var nc: OpaquePointer?
        s = natsConnection_Connect(&nc, opts)
        guard s == NATS_OK, let nc else {
            box.release()
            let how = security.summary(urls: urls)
            let error = EngineError(s, jsErrCode(rawValue: 0), "cannot connect to \(EngineURL.redacted(urls))" + (how.isEmpty ? "" : " \(how)"))
            // With TLS 1.3 a server that refuses the client's certificate (or its absence)
            // says so after the handshake, by closing: libnats sees no answer ("Expected
            // 'PONG', got ''") or a failed write ("SSL_write error: (null)").
            guard s == NATS_PROTOCOL_ERROR || s == NATS_IO_ERROR, security.usesTLS(urls: urls) else { throw error }
            throw error.adding(security.certificateFile == nil
                ? "(the server closed the connection after the TLS handshake: does it require a client certificate?)"
                : "(the server closed the connection after the TLS handshake: does it trust this client certificate?)")
        }
        var jsOpts = jsOptions()
        jsOptions_Init(&jsOpts)
        jsOpts.Wait = timeoutMs
        // Every asynchronous publish's answer comes to one handler, which finds its
        // callback by message id. The box lives as long as the process: libnats may call
        // the handler until the context's last reference is gone, after close().
        let pending = PendingAcks()
        jsOpts.PublishAsync.AckHandler = Self.asyncAck
        jsOpts.PublishAsync.AckHandlerClosure = Unmanaged.passRetained(pending).toOpaque()
        jsOpts.PublishAsync.MaxPending = 1 << 20
        var ctx: OpaquePointer?
        s = natsConnection_JetStream(&ctx, nc, &jsOpts)
        guard s == NATS_OK, let ctx else {
            // The closed callback releases the box.
            status.closing.store(true, ordering: .releasing)
            natsConnection_Close(nc)
            natsConnection_Destroy(nc)
            throw EngineError(s, jsErrCode(rawValue: 0), "no JetStream context")
        }
        connection = nc
        js = ctx
        self.status = status
        self.pending = pending
        onChange(true)
    }

    /// Sets `security` in `opts`: TLS and its files (libnats loads them now, so a bad file
    /// fails here, named in libnats' text), and the credentials (a credentials file is
    /// read at each connect).
    private static func apply(_ security: EngineSecurity, urls: [String], to opts: OpaquePointer) throws(EngineError) {
        if security.usesTLS(urls: urls) {
            var s = natsOptions_SetSecure(opts, true)
            guard s == NATS_OK else { throw EngineError(s, jsErrCode(rawValue: 0), "TLS") }
            if let ca = security.caFile {
                s = natsOptions_LoadCATrustedCertificates(opts, ca)
                guard s == NATS_OK else { throw EngineError(s, jsErrCode(rawValue: 0), "TLS") }
            }
            if security.certificateFile != nil || security.keyFile != nil {
                guard let cert = security.certificateFile, let key = security.keyFile else {
                    throw EngineError(invalid: "TLS: a client certificate needs its key and a key its certificate")
                }
                s = natsOptions_LoadCertificatesChain(opts, cert, key)
                guard s == NATS_OK else { throw EngineError(s, jsErrCode(rawValue: 0), "TLS") }
            }
        }
        let s: natsStatus
        switch security.credentials {
        case nil: return
        case let .file(path): s = natsOptions_SetUserCredentialsFromFiles(opts, path, nil)
        case let .user(user, password):
            s = natsOptions_SetUserInfo(opts, EngineSecurity.jsonEscaped(user), EngineSecurity.jsonEscaped(password))
        }
        guard s == NATS_OK else { throw EngineError(s, jsErrCode(rawValue: 0), "credentials") }
    }

    /// Whether the connection is up now.
    public var isConnected: Bool { natsConnection_Status(connection) == NATS_CONN_STATUS_CONNECTED }

    /// The URL and server id of the engine server the connection is on now (nil while it
    /// is not connected).
    func connectedServer() -> (url: String?, id: String?) {
        destroying.withLock { _ in
            guard !closed.load(ordering: .acquiring) else { return (nil, nil) }
            func text(_ read: (UnsafeMutablePointer<CChar>, Int) -> natsStatus) -> String? {
                var buffer = [CChar](repeating: 0, count: 512)
                let s = buffer.withUnsafeMutableBufferPointer { read($0.baseAddress!, $0.count - 1) }
                let bytes = buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }
                return s == NATS_OK && !bytes.isEmpty ? String(decoding: bytes, as: UTF8.self) : nil
            }
            return (text { natsConnection_GetConnectedUrl(connection, $0, $1) }, text { natsConnection_GetConnectedServerId(connection, $0, $1) })
        }
    }

    /// Runs `body` with the connection and its JetStream context unless the client is
    /// closed (then nil): what runs off the caller's own calls (a consumer made again by a
    /// timer, a deletion on a queue) cannot reach them after ``close()`` destroyed them.
    func whileOpen<T>(_ body: (_ connection: OpaquePointer, _ js: OpaquePointer) -> T) -> T? {
        let entered = users.withLock { n -> Bool in
            guard !closed.load(ordering: .acquiring) else { return false }
            n += 1
            return true
        }
        guard entered else { return nil }
        defer { users.withLock { $0 -= 1 } }
        return body(connection, js)
    }

    /// Closes the connection (subscriptions stop). Idempotent.
    public func close() {
        // Taken under `users`' lock, so that no ``whileOpen(_:)`` enters after it.
        guard !users.withLock({ _ in closed.exchange(true, ordering: .acquiringAndReleasing) }) else { return }
        status.closing.store(true, ordering: .releasing)
        // Calls in progress end within their timeouts (the connection's close fails them).
        natsConnection_Close(connection)
        while users.withLock({ $0 }) > 0 { usleep(1000) }
        jsCtx_Destroy(js)
        destroying.withLock { _ in natsConnection_Destroy(connection) }
    }

    deinit { close() }

    // MARK: Streams

    /// Creates the stream if it does not exist (an existing one is left as it is) and
    /// returns its info. `replicas` is what is asked for; the info says what it got.
    public func ensureStream(name: String, subjects: [String], replicas: Int, maxMessages: Int64 = -1,
                             maxPerSubject: Int64 = -1, duplicateWindowSeconds: Int64 = 120,
                             allowDirect: Bool = false) throws(EngineError) -> StreamInfo {
        if let info = try streamInfo(name) { return info }
        var cfg = jsStreamConfig()
        jsStreamConfig_Init(&cfg)
        var err = jsErrCode(rawValue: 0)
        var si: UnsafeMutablePointer<jsStreamInfo>?
        let cSubjects = subjects.map { strdup($0) }
        defer { cSubjects.forEach { free($0) } }
        var pointers = cSubjects.map { UnsafePointer<CChar>($0) }
        let s: natsStatus = name.withCString { cName in
            pointers.withUnsafeMutableBufferPointer { subs in
                cfg.Name = cName
                cfg.Subjects = subs.baseAddress
                cfg.SubjectsLen = Int32(subjects.count)
                cfg.Storage = js_FileStorage
                cfg.Replicas = Int64(replicas)
                cfg.MaxMsgs = maxMessages
                cfg.MaxMsgsPerSubject = maxPerSubject
                cfg.Duplicates = duplicateWindowSeconds * 1_000_000_000
                cfg.AllowDirect = allowDirect
                return whileOpen { _, js in js_AddStream(&si, js, &cfg, nil, &err) } ?? NATS_CONNECTION_CLOSED
            }
        }
        if s == NATS_OK, let si {
            defer { jsStreamInfo_Destroy(si) }
            return Self.info(si)
        }
        // Created by someone else meanwhile: that one counts.
        if let info = try streamInfo(name) { return info }
        throw EngineError(s, err, "cannot create stream \(name)")
    }

    /// The stream's info, or nil when there is no such stream.
    public func streamInfo(_ name: String) throws(EngineError) -> StreamInfo? {
        var si: UnsafeMutablePointer<jsStreamInfo>?
        var err = jsErrCode(rawValue: 0)
        let s = whileOpen { _, js in js_GetStreamInfo(&si, js, name, nil, &err) } ?? NATS_CONNECTION_CLOSED
        if s == NATS_NOT_FOUND || Int(err.rawValue) == EngineError.streamNotFound { return nil }
        guard s == NATS_OK, let si else { throw EngineError(s, err, "cannot read stream \(name)") }
        defer { jsStreamInfo_Destroy(si) }
        return Self.info(si)
    }

    /// Deletes the stream; false when there was none.
    public func deleteStream(_ name: String) throws(EngineError) -> Bool {
        var err = jsErrCode(rawValue: 0)
        let s = whileOpen { _, js in js_DeleteStream(js, name, nil, &err) } ?? NATS_CONNECTION_CLOSED
        if s == NATS_NOT_FOUND || Int(err.rawValue) == EngineError.streamNotFound { return false }
        guard s == NATS_OK else { throw EngineError(s, err, "cannot delete stream \(name)") }
        return true
    }

    /// The names of every stream.
    public func streamNames() throws(EngineError) -> [String] {
        var list: UnsafeMutablePointer<jsStreamNamesList>?
        var err = jsErrCode(rawValue: 0)
        let s = whileOpen { _, js in js_StreamNames(&list, js, nil, &err) } ?? NATS_CONNECTION_CLOSED
        if s == NATS_NOT_FOUND { return [] }
        guard s == NATS_OK, let list else { throw EngineError(s, err, "cannot list streams") }
        defer { jsStreamNamesList_Destroy(list) }
        return (0..<Int(list.pointee.Count)).compactMap { list.pointee.List[$0].map { String(cString: $0) } }
    }

    private static func info(_ si: UnsafeMutablePointer<jsStreamInfo>) -> StreamInfo {
        let cfg = si.pointee.Config!.pointee
        return StreamInfo(name: String(cString: cfg.Name), replicas: Int(cfg.Replicas),
                          firstSeq: si.pointee.State.FirstSeq, lastSeq: si.pointee.State.LastSeq, messages: si.pointee.State.Msgs,
                          created: si.pointee.Created)
    }

    // MARK: Publishing

    /// Publishes `data` to `subject` with `headers`; with `expectedLastSeq` only if the
    /// stream's last sequence is that (0: the stream is empty); with `msgID` at most once
    /// within the stream's duplicate window.
    /// With `perSubject` the expectation is on `subject`'s last sequence in the stream (0:
    /// no message on it) rather than the stream's.
    public func publish(subject: String, data: [UInt8], headers: [(String, String)] = [], expectedLastSeq: UInt64? = nil,
                        perSubject: Bool = false, msgID: String? = nil, timeoutMs: Int64 = 2000) -> PublishResult {
        let msg: OpaquePointer
        switch Self.message(subject: subject, data: data, headers: headers, expectedLastSeq: expectedLastSeq, perSubject: perSubject) {
        case let .success(m): msg = m
        case let .failure(why): return .failed(why.description)
        }
        defer { natsMsg_Destroy(msg) }
        var s: natsStatus
        var opts = jsPubOptions()
        jsPubOptions_Init(&opts)
        opts.MaxWait = timeoutMs
        if let expectedLastSeq, expectedLastSeq > 0 {
            if perSubject { opts.ExpectLastSubjectSeq = expectedLastSeq } else { opts.ExpectLastSeq = expectedLastSeq }
        }
        var ack: UnsafeMutablePointer<jsPubAck>?
        var err = jsErrCode(rawValue: 0)
        s = (msgID ?? "").withCString { id in
            if msgID != nil { opts.MsgId = id }
            return whileOpen { _, js in js_PublishMsg(&ack, js, msg, &opts, &err) } ?? NATS_CONNECTION_CLOSED
        }
        if s == NATS_OK, let ack {
            defer { jsPubAck_Destroy(ack) }
            return .stored(seq: ack.pointee.Sequence, duplicate: ack.pointee.Duplicate)
        }
        if EngineError.isPlaceTaken(Int(err.rawValue)) { return .wrongLastSequence }
        let error = EngineError(s, err, "publish to \(subject)")
        // A timeout, or no connection at the moment: the message may have been stored.
        if s == NATS_TIMEOUT || s == NATS_NO_RESPONDERS || s == NATS_CONNECTION_DISCONNECTED || s == NATS_CONNECTION_CLOSED || err.rawValue == 0 {
            return .unknown(error.description)
        }
        return .failed(error.description)
    }

    /// Publishes like ``publish(subject:data:headers:expectedLastSeq:msgID:timeoutMs:)``
    /// without waiting: messages published from one thread go out in the order of the
    /// calls, and `done` hears each one's answer (on libnats' thread; quick) — within
    /// `timeoutMs` or as `unknown`. With `expectedLastMessageID` the stream must also end
    /// with that message (a chain of appends: a broken link fails every later one).
    /// At most one publish with a given `msgID` may wait for its answer at a time.
    public func publishAsync(subject: String, data: [UInt8], headers: [(String, String)] = [], expectedLastSeq: UInt64?,
                             perSubject: Bool = false, expectedLastMessageID: String? = nil, msgID: String, timeoutMs: Int64 = 2000,
                             done: @escaping @Sendable (PublishResult) -> Void) {
        let msg: OpaquePointer
        switch Self.message(subject: subject, data: data, headers: headers, expectedLastSeq: expectedLastSeq, perSubject: perSubject) {
        case let .success(m): msg = m
        case let .failure(why): return done(.failed(why.description))
        }
        var s: natsStatus
        if let expectedLastMessageID { natsMsgHeader_Set(msg, "Nats-Expected-Last-Msg-Id", expectedLastMessageID) }
        var opts = jsPubOptions()
        jsPubOptions_Init(&opts)
        opts.MaxWait = timeoutMs
        if let expectedLastSeq, expectedLastSeq > 0 {
            if perSubject { opts.ExpectLastSubjectSeq = expectedLastSeq } else { opts.ExpectLastSeq = expectedLastSeq }
        }
        pending.register(msgID, done)
        var owned: OpaquePointer? = msg
        s = msgID.withCString { id in
            opts.MsgId = id
            return whileOpen { _, js in js_PublishMsgAsync(js, &owned, &opts) } ?? NATS_CONNECTION_CLOSED
        }
        guard s != NATS_OK else { return }
        // Not sent: the message is still ours, and so is the answer.
        if let owned { natsMsg_Destroy(owned) }
        guard let callback = pending.take(msgID) else { return }
        let error = EngineError(s, jsErrCode(rawValue: 0), "publish to \(subject)")
        callback(s == NATS_CONNECTION_CLOSED || s == NATS_CONNECTION_DISCONNECTED || s == NATS_TIMEOUT
                 ? .unknown(error.description) : .failed(error.description))
    }

    /// A message to publish (the caller destroys it): `data` with `headers`; an expected
    /// last sequence of 0 (an empty stream, or no message on the subject) goes as a header,
    /// since libnats sends `ExpectLastSeq` and `ExpectLastSubjectSeq` only when above 0.
    private static func message(subject: String, data: [UInt8], headers: [(String, String)],
                                expectedLastSeq: UInt64?, perSubject: Bool = false) -> Result<OpaquePointer, EngineError> {
        var msg: OpaquePointer?
        let s = data.withUnsafeBufferPointer { buffer in
            natsMsg_Create(&msg, subject, nil, buffer.baseAddress.map { UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self) }, Int32(data.count))
        }
        guard s == NATS_OK, let msg else { return .failure(EngineError(s, jsErrCode(rawValue: 0), "cannot build a message")) }
        for (key, value) in headers { natsMsgHeader_Set(msg, key, value) }
        if expectedLastSeq == 0 { natsMsgHeader_Set(msg, perSubject ? "Nats-Expected-Last-Subject-Sequence" : "Nats-Expected-Last-Sequence", "0") }
        return .success(msg)
    }

    /// The answer to an asynchronous publish, to the callback of its message id.
    private static let asyncAck: jsPubAckHandler = { _, msg, pa, pae, closure in
        guard let msg, let closure else { return }
        defer { natsMsg_Destroy(msg) }
        let pending = Unmanaged<PendingAcks>.fromOpaque(closure).takeUnretainedValue()
        var value: UnsafePointer<CChar>?
        guard natsMsgHeader_Get(msg, "Nats-Msg-Id", &value) == NATS_OK, let value,
              let callback = pending.take(String(cString: value)) else { return }
        if let pa {
            callback(.stored(seq: pa.pointee.Sequence, duplicate: pa.pointee.Duplicate))
            return
        }
        let status = pae?.pointee.Err ?? NATS_ERR
        let code = Int(pae?.pointee.ErrCode.rawValue ?? 0)
        if EngineError.isPlaceTaken(code) { return callback(.wrongLastSequence) }
        let text = pae?.pointee.ErrText.map { String(cString: $0) } ?? String(cString: natsStatus_GetText(status))
        let why = code == 0 ? "asynchronous publish: \(text)" : "asynchronous publish: \(text) (JetStream error \(code))"
        if status == NATS_TIMEOUT || status == NATS_NO_RESPONDERS || status == NATS_CONNECTION_DISCONNECTED
            || status == NATS_CONNECTION_CLOSED || code == 0 {
            callback(.unknown(why))
        } else {
            callback(.failed(why))
        }
    }

    /// The last message on `subject` in `stream`, or nil when there is none.
    public func lastMessage(stream: String, subject: String, headerKeys: [String] = []) throws(EngineError) -> StreamMessage? {
        var msg: OpaquePointer?
        var err = jsErrCode(rawValue: 0)
        let s = whileOpen { _, js in js_GetLastMsg(&msg, js, stream, subject, nil, &err) } ?? NATS_CONNECTION_CLOSED
        if s == NATS_NOT_FOUND || Int(err.rawValue) == EngineError.noMessageFound || Int(err.rawValue) == EngineError.streamNotFound { return nil }
        guard s == NATS_OK, let msg else { throw EngineError(s, err, "cannot read the last message of \(subject)") }
        defer { natsMsg_Destroy(msg) }
        // libnats keeps the stream sequence of a message it got from the stream's API.
        var seq = natsMsg_GetSequence(msg)
        var value: UnsafePointer<CChar>?
        if seq == 0, natsMsgHeader_Get(msg, "Nats-Sequence", &value) == NATS_OK, let value { seq = UInt64(String(cString: value)) ?? 0 }
        return Self.message(msg, headerKeys: headerKeys, streamSeq: seq, pending: 0)
    }

    /// Whether the message at `seq` in `stream` is the one published with `msgID`: how a
    /// retry of a room's first message learns that an earlier attempt stands at seq 1
    /// where the server checks the retry's (now stale) expected last sequence before its
    /// duplicate window. NATS 2.9 and replicated streams answer such a retry "duplicate";
    /// NATS 2.15.1 on a stream of one replica answers "wrong last sequence".
    public func holds(msgID: String, at seq: UInt64, in stream: String) throws(EngineError) -> Bool {
        try message(stream: stream, seq: seq, headerKeys: ["Nats-Msg-Id"])?.headers["Nats-Msg-Id"] == msgID
    }

    /// The message at `seq` in `stream`, or nil when there is none (never was, or discarded).
    public func message(stream: String, seq: UInt64, headerKeys: [String] = []) throws(EngineError) -> StreamMessage? {
        var msg: OpaquePointer?
        var err = jsErrCode(rawValue: 0)
        let s = whileOpen { _, js in js_GetMsg(&msg, js, stream, seq, nil, &err) } ?? NATS_CONNECTION_CLOSED
        if s == NATS_NOT_FOUND || Int(err.rawValue) == EngineError.noMessageFound || Int(err.rawValue) == EngineError.streamNotFound { return nil }
        guard s == NATS_OK, let msg else { throw EngineError(s, err, "cannot read message \(seq) of \(stream)") }
        defer { natsMsg_Destroy(msg) }
        return Self.message(msg, headerKeys: headerKeys, streamSeq: seq, pending: 0)
    }

    /// The first message on `subject` in `stream` at or after `seq`, or nil when there is
    /// none, read with a direct get (any replica of a stream made with `allowDirect`
    /// answers, so a lagging one may not have the newest: confirm the end with
    /// ``lastMessage(stream:subject:headerKeys:)``, which the stream's leader answers).
    public func nextMessage(stream: String, subject: String, from seq: UInt64, headerKeys: [String] = []) throws(EngineError) -> StreamMessage? {
        var msg: OpaquePointer?
        var opts = jsDirectGetMsgOptions()
        jsDirectGetMsgOptions_Init(&opts)
        opts.Sequence = seq
        let s = subject.withCString { cSubject in
            opts.NextBySubject = cSubject
            return whileOpen { _, js in js_DirectGetMsg(&msg, js, stream, nil, &opts) } ?? NATS_CONNECTION_CLOSED
        }
        if s == NATS_NOT_FOUND { return nil }
        guard s == NATS_OK, let msg else { throw EngineError(s, jsErrCode(rawValue: 0), "cannot read \(subject) in \(stream) from \(seq)") }
        defer { natsMsg_Destroy(msg) }
        var found = natsMsg_GetSequence(msg)
        var value: UnsafePointer<CChar>?
        if found == 0, natsMsgHeader_Get(msg, "Nats-Sequence", &value) == NATS_OK, let value { found = UInt64(String(cString: value)) ?? 0 }
        guard found >= seq else { throw EngineError(invalid: "a direct get of \(subject) from \(seq) answered seq \(found)") }
        var subjectValue: UnsafePointer<CChar>?
        let stored = natsMsgHeader_Get(msg, "Nats-Subject", &subjectValue) == NATS_OK ? subjectValue.map { String(cString: $0) } : nil
        guard stored == nil || Self.subject(stored!, matches: subject) else { throw EngineError(invalid: "a direct get of \(subject) answered a message of \(stored!)") }
        let message = Self.message(msg, headerKeys: headerKeys, streamSeq: found, pending: 0)
        return StreamMessage(subject: stored ?? subject, data: message.data, headers: message.headers, streamSeq: found, pending: 0)
    }

    /// Whether `subject` is one `filter` names (`*` matches one token, a last `>` the rest).
    static func subject(_ subject: String, matches filter: String) -> Bool {
        let s = subject.split(separator: ".", omittingEmptySubsequences: false)
        let f = filter.split(separator: ".", omittingEmptySubsequences: false)
        for (i, token) in f.enumerated() {
            if token == ">" { return i == f.count - 1 && s.count > i }
            guard i < s.count, token == "*" || token == s[i] else { return false }
        }
        return s.count == f.count
    }

    /// Removes the messages on `subject` from `stream` but the last `keep`.
    public func purge(stream: String, subject: String, keep: UInt64) throws(EngineError) {
        var opts = jsOptions()
        jsOptions_Init(&opts)
        var err = jsErrCode(rawValue: 0)
        let s = subject.withCString { cSubject in
            opts.Stream.Purge.Subject = cSubject
            opts.Stream.Purge.Keep = keep
            return whileOpen { _, js in js_PurgeStream(js, stream, &opts, &err) } ?? NATS_CONNECTION_CLOSED
        }
        guard s == NATS_OK else { throw EngineError(s, err, "cannot purge \(subject) in \(stream)") }
    }

    /// The subjects of `stream` matching `filter`, with how many messages each holds.
    public func subjects(stream: String, filter: String) throws(EngineError) -> [String: UInt64] {
        var opts = jsOptions()
        jsOptions_Init(&opts)
        var si: UnsafeMutablePointer<jsStreamInfo>?
        var err = jsErrCode(rawValue: 0)
        let s = filter.withCString { cFilter in
            opts.Stream.Info.SubjectsFilter = cFilter
            return whileOpen { _, js in js_GetStreamInfo(&si, js, stream, &opts, &err) } ?? NATS_CONNECTION_CLOSED
        }
        if s == NATS_NOT_FOUND || Int(err.rawValue) == EngineError.streamNotFound { return [:] }
        guard s == NATS_OK, let si else { throw EngineError(s, err, "cannot list the subjects of \(stream)") }
        defer { jsStreamInfo_Destroy(si) }
        var out: [String: UInt64] = [:]
        if let list = si.pointee.State.Subjects {
            out.reserveCapacity(Int(list.pointee.Count))
            for i in 0..<Int(list.pointee.Count) {
                let entry = list.pointee.List[i]
                if let name = entry.Subject { out[String(cString: name)] = entry.Msgs }
            }
        }
        return out
    }

    /// Core NATS: fire and forget (heartbeats).
    public func publishCore(subject: String, data: [UInt8]) {
        _ = whileOpen { connection, _ in data.withUnsafeBytes { natsConnection_Publish(connection, subject, $0.baseAddress, Int32(data.count)) } }
    }

    // MARK: Subscribing

    /// An ordered consumer of `subject` in `stream` from `startSeq` on: every message,
    /// once, in stream order, made again after any gap or silence (``OrderedSubscription``:
    /// tabd's own, which obeys nothing that reaches its inbox). `report` hears a second
    /// message for a place already delivered, and each new consumer.
    public func subscribeOrdered(stream: String, subject: String, startSeq: UInt64, headerKeys: [String],
                                 report: @escaping @Sendable (OrderedSubscription.Report) -> Void = { _ in },
                                 handler: @escaping @Sendable (StreamMessage) -> Void) throws(EngineError) -> OrderedSubscription {
        try OrderedSubscription(client: self, stream: stream, subject: subject, startSeq: startSeq, headerKeys: headerKeys,
                                handler: handler, report: report)
    }

    static let orderedHeartbeatNanoseconds: Int64 = 1_000_000_000

    /// Core NATS subscription (heartbeats, notices).
    public func subscribeCore(subject: String, handler: @escaping @Sendable (StreamMessage) -> Void) throws(EngineError) -> EngineSubscription {
        let box = Unmanaged.passRetained(HandlerBox(handler: handler))
        var sub: OpaquePointer?
        let s = whileOpen { connection, _ in natsConnection_Subscribe(&sub, connection, subject, Self.deliver, box.toOpaque()) } ?? NATS_CONNECTION_CLOSED
        guard s == NATS_OK, let sub else {
            box.release()
            throw EngineError(s, jsErrCode(rawValue: 0), "cannot subscribe to \(subject)")
        }
        return EngineSubscription(sub, box)
    }

    /// A core message (no stream position: nothing that reaches a core subscription
    /// is taken for one).
    private static let deliver: natsMsgHandler = { _, _, msg, closure in
        guard let msg, let closure else { return }
        let box = Unmanaged<HandlerBox>.fromOpaque(closure).takeUnretainedValue()
        let message = EngineClient.message(msg, headerKeys: [], streamSeq: 0, pending: 0)
        natsMsg_Destroy(msg)
        box.handler(message)
    }

    static func message(_ msg: OpaquePointer, headerKeys: [String], streamSeq: UInt64, pending: UInt64) -> StreamMessage {
        let length = Int(natsMsg_GetDataLength(msg))
        var data = [UInt8](repeating: 0, count: length)
        if length > 0, let bytes = natsMsg_GetData(msg) {
            data.withUnsafeMutableBytes { $0.copyMemory(from: UnsafeRawBufferPointer(start: bytes, count: length)) }
        }
        var headers: [String: String] = [:]
        for key in headerKeys {
            var value: UnsafePointer<CChar>?
            if natsMsgHeader_Get(msg, key, &value) == NATS_OK, let value { headers[key] = String(cString: value) }
        }
        return StreamMessage(subject: String(cString: natsMsg_GetSubject(msg)), data: data, headers: headers,
                             streamSeq: streamSeq, pending: pending)
    }
}

/// A live subscription; ``cancel()`` stops it (also on deinit).
public final class EngineSubscription: @unchecked Sendable {
    // @unchecked: libnats' subscription is thread-safe; released once, guarded by `done`.
    private let sub: OpaquePointer
    private let box: Unmanaged<HandlerBox>
    private let done = Atomic<Bool>(false)

    /// The handler box is released by libnats' completion callback, which runs after the
    /// last message callback: a callback running while ``cancel()`` is called stays safe.
    init(_ sub: OpaquePointer, _ box: Unmanaged<HandlerBox>) {
        self.sub = sub
        self.box = box
        natsSubscription_SetOnCompleteCB(sub, { closure in
            Unmanaged<HandlerBox>.fromOpaque(closure!).release()
        }, box.toOpaque())
    }

    /// Stops deliveries now; frees the subscription a few seconds later (``retireSubscription(_:)``).
    public func cancel() {
        guard !done.exchange(true, ordering: .acquiringAndReleasing) else { return }
        retireSubscription(sub)
    }

    deinit { cancel() }
}

/// Stops a libnats subscription now and destroys it a few seconds later: libnats 3.4's
/// reader thread can still be inside a delivery to a subscription it has just looked up
/// when another thread destroys it (nats.c issue #637, a crash seen here when a stalled
/// consumer was replaced). After the unsubscribe no new delivery starts, and the delay
/// outlasts one in progress.
func retireSubscription(_ sub: OpaquePointer) {
    natsSubscription_Unsubscribe(sub)
    let doomed = Doomed(sub)
    DispatchQueue.global().asyncAfter(deadline: .now() + 5) { natsSubscription_Destroy(doomed.sub) }
}

/// A subscription handed to the queue that destroys it (used by nothing else).
private struct Doomed: @unchecked Sendable {
    // @unchecked: handed once to that queue.
    let sub: OpaquePointer
    init(_ sub: OpaquePointer) { self.sub = sub }
}

final class HandlerBox: Sendable {
    let handler: @Sendable (StreamMessage) -> Void
    init(handler: @escaping @Sendable (StreamMessage) -> Void) { self.handler = handler }
}

/// The callbacks of asynchronous publishes waiting for an answer, by message id.
final class PendingAcks: Sendable {
    private let callbacks = Locked<[String: @Sendable (PublishResult) -> Void]>([:])
    func register(_ id: String, _ callback: @escaping @Sendable (PublishResult) -> Void) {
        callbacks.withLock { $0[id] = callback }
    }
    func take(_ id: String) -> (@Sendable (PublishResult) -> Void)? { callbacks.withLock { $0.removeValue(forKey: id) } }
}

/// The connection's callbacks, and whether tabd is closing it (then its end is no news).
final class StatusBox: Sendable {
    let changed: @Sendable (Bool) -> Void
    let gaveUp: @Sendable (String) -> Void
    let closing = Atomic<Bool>(false)
    init(changed: @escaping @Sendable (Bool) -> Void, gaveUp: @escaping @Sendable (String) -> Void) {
        self.changed = changed
        self.gaveUp = gaveUp
    }
}
