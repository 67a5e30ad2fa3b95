import CTLS
import CWebSockets
import FoundationEssentials
import Glibc
import Dispatch
import Locking
import Portable
import Synchronization

/// The engine behind `WebSocketServer`: the listening socket, the lws context on its event
/// loop, the locked connection table, and the state that only the service thread touches.
///
/// lws moves bytes; this type speaks the protocols. Every accepted socket is a `Connection`:
/// its HTTP requests are read by `HeadParser` and `BodyReader` and answered one at a time, in
/// order (ServiceLoop+HTTP.swift); an upgrade makes it a WebSocket whose frames
/// `FrameDecoder` reads (ServiceLoop+WebSocket.swift); its deadlines sit in one
/// `TimerWheel`, looked at on a tick every 250 ms. Nothing here costs more per pass than the
/// sockets that are ready in it, and no lookup depends on how many sockets are open.
///
/// Threads. `run()` is the service thread: it alone calls lws (callbacks arrive on it), and it
/// alone reads or writes the fields marked *service thread*. Other threads only change `table`
/// and `lifecycle` (each a `Locked`) and call `lws_cancel_service`, the one lws function that is
/// safe from any thread; they do so while holding the table lock and only before the table is
/// marked stopped, so the context is still alive. The handler is never called with a lock held.
///
/// Ownership. The lws context user pointer is `Unmanaged.passUnretained(self)`: this object
/// outlives the context because it destroys the context itself (at the end of `run()`, or in
/// `deinit` if the thread never started), and `run()` keeps `self` alive while it runs. Each
/// socket's lws user area holds an unretained `Connection` pointer: `connections` owns the
/// `Connection` from its adoption until lws reports it closed, where the pointer is cleared first.
final class ServiceLoop: @unchecked Sendable {
    // @unchecked Sendable: the mutable fields below are confined to the service thread (or to
    // the creating thread before it starts); shared state is in `Locked`s and `Atomic`s.

    enum Lifecycle { case created, running, finished }

    let configuration: Configuration
    let handler: any WebSocketServerHandler
    let table: Locked<ConnectionTable>
    private let lifecycle = Locked<Lifecycle>(.created)
    private let thread = ServiceThread(name: "tabd-lws")
    /// Set once in `init`, immutable afterwards (nil only while `init` runs).
    private(set) var lws: LWSContext!
    let listener: Listener
    /// Exact paths answered by the handler.
    let dynamicPaths: Set<String>
    /// Requests on dynamic paths whose answers are awaited.
    let http = HTTPExchanges()
    /// Sockets whose stream has something new (``wakeForStream(_:)``), for the next pass.
    let streamsReady = Locked<[UInt64]>([])
    let files: StaticFiles?
    /// Sockets open at most at once: the open-file limit less what the rest of the process needs.
    let maxSockets: Int
    /// The certificate and key of a TLS server (nil: plain HTTP).
    let tls: TLSStore?

    // Service thread only.
    var connections: [UInt64: Connection] = [:]
    /// The WebSocket connections, by the id the table knows them by.
    var sessions: [ConnectionID: Connection] = [:]
    var nextSocket: UInt64 = 1
    var timers: TimerWheel
    var listenerWSI: OpaquePointer?
    /// Accepting is paused: at `maxSockets`, or after accept() failed for want of resources
    /// (until `acceptRetryAt`).
    var acceptPaused = false
    var acceptRetryAt: UInt64?
    var lastAcceptError: UInt64 = 0
    var batch: [OutgoingFrame] = []
    /// WebSockets with output to write at the end of this pass (`writeDue`).
    var writesDue: [Connection] = []
    let scratch: UnsafeMutableRawBufferPointer
    let tick: UnsafeMutablePointer<tabd_tick>
    /// Connections that ended before their first request was complete.
    let incompleteRequests = Atomic<Int>(0)
    /// Sockets open (HTTP and WebSocket), for metrics and tests.
    let openSockets = Atomic<Int>(0)
    /// HTTP connections dropped because the answer they did not take was among the largest
    /// held when the total was past `Configuration.totalQueueBytes`.
    let droppedAnswers = Atomic<Int>(0)

    /// Bytes gathered from a connection's queue for one write.
    static let writeBudget = 16 * 1024
    /// Writes per writable callback before yielding to other connections.
    static let maxWritesPerCallback = 8
    /// Seconds a closing WebSocket gets to answer this side's close frame.
    static let closeTimeoutSeconds: UInt64 = 5
    /// Seconds an HTTP client may take none of its answers before it is dropped.
    static let stalledOutputSeconds: UInt64 = 60
    /// Seconds a shut connection may keep sending before it is dropped.
    static let lingerSeconds: UInt64 = 2
    /// Unread bytes held for one connection (pipelined requests behind an unanswered one)
    /// before its reading is paused.
    static let maxUnreadInput = 256 * 1024
    /// Unread body bytes of a refused request that are read and dropped to keep the
    /// connection; with more, it is closed after the answer instead.
    static let bodyDiscardLimit = 1 << 20
    /// Connections accepted per readiness of the listener, before other sockets get a turn.
    static let acceptBatch = 64

    init(configuration: Configuration, handler: any WebSocketServerHandler) throws(WebSocketServerError) {
        try configuration.validate()
        self.configuration = configuration
        self.handler = handler
        self.table = Locked(ConnectionTable(
            queueLimit: configuration.queueLimit, byteLimit: configuration.queueBytes, totalByteLimit: configuration.totalQueueBytes))
        self.dynamicPaths = Set(configuration.dynamicPaths)
        let fdLimit: Int
        do { fdLimit = try LWS.fileDescriptorLimit(for: configuration.maxConnections, fit: configuration.fitsOpenFileLimit) } catch {
            throw .fileDescriptorLimitTooLow(limit: error.limit, required: error.required)
        }
        maxSockets = max(16, fdLimit - LWS.reservedFileDescriptors)
        if let webRoot = configuration.webRoot {
            var info = stat()
            guard stat(webRoot, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else { throw .webRootMissing(path: webRoot) }
            files = StaticFiles(root: webRoot, strictSecurityHeaders: configuration.strictSecurityHeaders, moduleOrigins: configuration.moduleOrigins,
                                securityPolicy: configuration.fileSecurityPolicy)
        } else {
            files = nil
        }
        do throws(TLSError) { tls = try configuration.tls.map { files throws(TLSError) in try TLSStore(files: files) } } catch {
            throw .tls(error)
        }
        listener = try Listener(host: configuration.host, port: configuration.port)
        timers = TimerWheel(now: Self.now())
        scratch = .allocate(byteCount: Self.writeBudget, alignment: 16)
        tick = .allocate(capacity: 1)
        tick.initialize(to: tabd_tick())
        batch.reserveCapacity(256)
        tabd_ignore_sigpipe()
        // Every stored property is set, so a throw from here on still runs deinit.
        let user = Unmanaged.passUnretained(self).toOpaque()
        lws = try LWSContext(eventLoop: configuration.eventLoop, logLevel: configuration.logLevel,
                             logSink: configuration.logSink, tls: tls != nil,
                             handshakeSeconds: configuration.requestTimeoutSeconds, user: user)
        tick.pointee.user = user
        tick.pointee.fire = { user in
            guard let user else { return }
            Unmanaged<ServiceLoop>.fromOpaque(user).takeUnretainedValue().tickFired()
        }
        listenerWSI = tabd_adopt_listener(lws.vhost, listener.fd, lws.protocolName)
        guard listenerWSI != nil else {
            throw .libwebsocketsFailed("libwebsockets did not take the listening socket")
        }
    }

    deinit {
        // Only reached when the service thread never ran (run() retains self) or has finished.
        // Once lws has the listener (or failed to take it), closing it is lws' business.
        if let lws { lws.destroy() } else { close(listener.fd) }
        scratch.deallocate()
        tick.deallocate()
    }

    /// A line of the server's own for the log (through the configured sink, else stderr).
    func log(_ level: WebSocketLogLevel, _ text: String) {
        if let sink = configuration.logSink {
            sink(level, text)
        } else {
            StandardStream.error(("websockets: " + text + "\n"))
        }
    }

    var port: Int { listener.port }

    /// Uptime in nanoseconds (CLOCK_MONOTONIC_COARSE: a few ns to read, ms resolution).
    static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts)
        return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
    }

    // MARK: Any thread

    /// Applies `change` to the table and wakes the service thread if it asks for it.
    func update(_ change: (inout ConnectionTable) -> Bool) {
        table.withLock { table in
            // Under the lock: the context cannot be destroyed meanwhile (see the type's doc).
            if change(&table) { lws_cancel_service(lws.context) }
        }
    }

    /// Any thread: an answer arrived from outside the handler call.
    func wakeForHTTPAnswers() {
        table.withLock { table in
            // Under the table lock, as in `update`: the context lives until the table is stopped.
            if table.phase != .stopped { lws_cancel_service(lws.context) }
        }
    }

    /// Starts the service thread once; false if it was started or shut down before.
    func start() -> Bool {
        let starting = lifecycle.withLock { life -> Bool in
            guard life == .created else { return false }
            life = .running
            return true
        }
        guard starting else { return false }
        thread.start { [self] in run() }
        return true
    }

    /// Closes every connection with `code`, waits for them (at most `timeout`), then stops.
    func shutdown(code: CloseCode, reason: String, timeout: Duration) async {
        let neverStarted = lifecycle.withLock { life -> Bool in
            guard life == .created else { return false }
            life = .finished
            return true
        }
        if neverStarted {
            table.withLock { $0.markStopped() }
            lws.destroy()
            thread.markFinished()
            return
        }
        update { $0.beginShutdown(code: code, reason: reason) }
        await withTaskGroup(of: Bool.self) { group in
            group.addTask { await self.thread.finishedRunning(); return true }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return false
            }
            if await group.next() == false {
                update { $0.forceStop() }
            }
            group.cancelAll()
        }
    }

    // MARK: Service thread

    private func run() {
        tabd_tick_schedule(lws.context, tick, Int64(TimerWheel.tickNanoseconds / 1000))
        // Scheduled outside a callback, an lws timer is not armed on libuv until the next
        // event: make one (bench/evloop found this).
        lws_cancel_service(lws.context)
        thread.run(pass: { lws.loop.runOnce(lws.context) }, until: { table.withLock { $0.shouldExit } },
                   afterEachPass: { writeDue(); handler.serviceCycleEnded() }) {
            tabd_tick_cancel(tick)
            table.withLock { $0.markStopped() }
            lws.destroy()  // every socket is closed and reported through `closed`
            for connection in sessions.values {
                if let session = connection.session {
                    handler.disconnected(session.id, code: nil, reason: "server stopped")
                }
            }
            sessions = [:]
            connections = [:]
            writesDue = []
            lifecycle.withLock { $0 = .finished }
        }
    }

    /// Every 250 ms: the deadlines that passed, and accepting again after a pause.
    func tickFired() {
        let now = Self.now()
        for entry in timers.takeDue(now: now) {
            guard let connection = connections[entry.socket], connection.deadline == entry.deadline, !connection.killed
            else { continue }
            connection.deadline = 0
            deadlinePassed(connection, now: now)
        }
        if let retry = acceptRetryAt, now >= retry {
            acceptRetryAt = nil
            resumeAccepting()
        }
        tabd_tick_schedule(lws.context, tick, Int64(TimerWheel.tickNanoseconds / 1000))
    }

    /// Gives a connection a new deadline (replacing its old one).
    func setDeadline(_ connection: Connection, after seconds: UInt64, now: UInt64 = ServiceLoop.now()) {
        let deadline = now + seconds * 1_000_000_000
        connection.deadline = deadline
        timers.schedule(connection.socket, at: deadline)
    }

    /// What a connection's deadline means depends on where it is.
    private func deadlinePassed(_ connection: Connection, now: UInt64) {
        switch connection.phase {
        case .http:
            httpDeadlinePassed(connection)
        case .webSocket:
            webSocketDeadlinePassed(connection, now: now)
        case .flushing, .lingering:
            kill(connection)
        }
    }

    /// Another thread changed the table, or an HTTP answer arrived: act on it.
    func wake() {
        let work = table.withLock { $0.takeWakeWork() }
        // Written at the end of this pass, not on a writable callback: asking lws for one costs
        // two changes of the socket's epoll events (on, then off again) and another pass, per
        // connection and batch; and what the pass publishes for a connection goes out in one
        // write. A socket that does not take it all is left to lws, which asks for itself.
        if work.writableAll {
            for connection in sessions.values { queueWrite(connection) }
        } else {
            for id in work.writable {
                if let connection = sessions[id] { queueWrite(connection) }
            }
        }
        let now = Self.now()
        for id in work.closing {
            // Its socket may stay choked: drop it if the close frame cannot go out in time.
            if let connection = sessions[id], connection.phase == .webSocket {
                setDeadline(connection, after: Self.closeTimeoutSeconds, now: now)
            }
        }
        if !work.dropAnswers.isEmpty { dropAnswers(work.dropAnswers) }
        writeArrivedAnswers()
        pumpReadyStreams()
    }

    private func queueWrite(_ connection: Connection) {
        guard !connection.writeQueued else { return }
        connection.writeQueued = true
        writesDue.append(connection)
    }

    /// After each pass: writes what the WebSockets woken in it have to receive, outside any
    /// callback of their own.
    func writeDue() {
        guard !writesDue.isEmpty else { return }
        // By index, so the array keeps its storage from pass to pass (a copy taken here
        // would make the next append allocate); one queued meanwhile is written too.
        var index = 0
        defer { writesDue.removeAll(keepingCapacity: true) }
        while index < writesDue.count {
            let connection = writesDue[index]
            index += 1
            connection.writeQueued = false
            // lws may have closed it earlier in the pass: its wsi is gone then.
            guard !connection.gone else { continue }
            guard connection.phase == .webSocket, !connection.killed else {
                if !connection.killed && connection.phase == .flushing { lws_callback_on_writable(connection.wsi) }
                continue
            }
            if webSocketWriteable(connection) < 0 { kill(connection) }
        }
    }

    // MARK: Sockets coming and going

    /// The listener is readable: accept what is waiting, at most `acceptBatch` at a time, and
    /// never past `maxSockets` (then the listener is not watched until a socket closes, and
    /// the kernel's backlog holds the rest). Out of files or memory despite that, accepting
    /// pauses for a second instead of failing in a loop.
    func acceptConnections() {
        for _ in 0..<Self.acceptBatch {
            if openSockets.load(ordering: .relaxed) >= maxSockets {
                pauseAccepting(retryAt: nil)
                return
            }
            let fd = tabd_accept(listener.fd)
            if fd < 0 {
                let error = tabd_errno()
                switch error {
                case EAGAIN, EWOULDBLOCK:
                    return
                case EINTR, ECONNABORTED, EPROTO, EPERM:
                    continue
                default:
                    // EMFILE, ENFILE, ENOBUFS, ENOMEM: the process or the system is out of room.
                    let now = Self.now()
                    if now &- lastAcceptError > 10_000_000_000 {
                        lastAcceptError = now
                        log(.warn, "accept() failed (\(String(cString: strerror(error)))); not accepting for 1 s")
                    }
                    pauseAccepting(retryAt: now + 1_000_000_000)
                    return
                }
            }
            // lws calls back (LWS_CALLBACK_RAW_ADOPT) before this returns; on failure it closed fd.
            _ = tabd_adopt_socket(lws.vhost, fd, lws.protocolName, tls == nil ? 0 : 1)
        }
    }

    private func pauseAccepting(retryAt: UInt64?) {
        acceptRetryAt = retryAt
        guard !acceptPaused, let listenerWSI else { return }
        acceptPaused = true
        lws_rx_flow_control(listenerWSI, 0)
    }

    private func resumeAccepting() {
        guard acceptPaused, acceptRetryAt == nil, let listenerWSI else { return }
        acceptPaused = false
        lws_rx_flow_control(listenerWSI, 1)
    }

    /// LWS_CALLBACK_RAW_ADOPT: a new socket.
    func adopted(_ wsi: OpaquePointer, user: UnsafeMutableRawPointer?) -> Int32 {
        guard let user else { return -1 }
        let connection = Connection(socket: nextSocket, wsi: wsi)
        nextSocket += 1
        connections[connection.socket] = connection
        openSockets.add(1, ordering: .relaxed)
        user.storeBytes(of: Unmanaged.passUnretained(connection).toOpaque(), as: UnsafeMutableRawPointer?.self)
        setDeadline(connection, after: UInt64(configuration.requestTimeoutSeconds))
        return 0
    }

    /// LWS_CALLBACK_RAW_CLOSE: the socket is gone, for whatever reason.
    func closed(_ connection: Connection, user: UnsafeMutableRawPointer?) {
        user?.storeBytes(of: nil, as: UnsafeMutableRawPointer?.self)
        connection.gone = true
        connections[connection.socket] = nil
        openSockets.add(-1, ordering: .relaxed)
        connection.input.release()
        connection.answer = nil
        if connection.answerHeld > 0 {
            connection.answerHeld = 0
            update { $0.releaseAnswer(socket: connection.socket); return false }
        }
        if !connection.sawRequest { incompleteRequests.add(1, ordering: .relaxed) }
        switch connection.http.stage {
        case let .answering(request), let .body(request):
            if let id = request.exchangeID { http.remove(id) }
        case let .streaming(stream):
            stream.connectionGone()
        default: break
        }
        if let session = connection.session {
            sessions[session.id] = nil
            let decided = table.withLock { $0.remove(session.id) }
            let code: CloseCode?
            let reason: String
            if let local = session.localClose ?? decided {
                (code, reason) = (local.code, local.reason)
            } else if let peer = session.peerClose {
                (code, reason) = (peer.code, peer.reason)
            } else {
                (code, reason) = (nil, session.dropReason ?? "connection lost")
            }
            handler.disconnected(session.id, code: code, reason: reason)
        }
        if acceptPaused && acceptRetryAt == nil { resumeAccepting() }
    }

    /// Drops a connection now, without another byte: lws closes it at its next callback,
    /// which the shut socket brings at once (readable and writable).
    func kill(_ connection: Connection) {
        guard !connection.killed else { return }
        connection.killed = true
        if connection.readingPaused {
            connection.readingPaused = false
            lws_rx_flow_control(connection.wsi, 1)
        }
        tabd_drop_connection(connection.wsi)
        lws_callback_on_writable(connection.wsi)
    }

    /// Writes the rest of what lws holds for the connection, then shuts its sending side:
    /// the peer reads everything, then the end of the stream. What it still sends is
    /// dropped until it closes, for at most `lingerSeconds`.
    func closeAfterFlush(_ connection: Connection) {
        guard !connection.killed, connection.phase != .flushing, connection.phase != .lingering else { return }
        connection.phase = .flushing
        connection.input.release()
        if connection.readingPaused {
            connection.readingPaused = false
            lws_rx_flow_control(connection.wsi, 1)
        }
        setDeadline(connection, after: Self.closeTimeoutSeconds)
        lws_callback_on_writable(connection.wsi)
    }

    /// LWS_CALLBACK_RAW_WRITEABLE for a connection that is flushing: shut it once its last
    /// answer is written and lws holds nothing more for it.
    func flushed(_ connection: Connection) {
        guard writeAnswer(connection) else { return }  // it asked for another writable callback
        if tls != nil { tabd_tls_close_notify(UnsafeMutableRawPointer(lws_get_ssl(connection.wsi))) }
        tabd_shutdown_write(connection.wsi)
        connection.phase = .lingering
        setDeadline(connection, after: Self.lingerSeconds)
    }

    /// Writes bytes as they are (lws buffers what the socket does not take at once).
    @discardableResult
    func write(_ bytes: [UInt8], to connection: Connection) -> Bool {
        bytes.withUnsafeBytes { tabd_lws_write_raw(connection.wsi, $0.baseAddress, $0.count) } >= 0
    }

    /// Pauses or resumes reading a connection's socket.
    func setReading(_ connection: Connection, paused: Bool) {
        guard connection.readingPaused != paused, !connection.killed else { return }
        connection.readingPaused = paused
        lws_rx_flow_control(connection.wsi, paused ? 0 : 1)
    }
}
