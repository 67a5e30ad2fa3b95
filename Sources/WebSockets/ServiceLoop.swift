import Locking
import CWebSockets
import Foundation
import Synchronization

/// The engine behind `WebSocketServer`: the lws context, the locked connection table, and the
/// state that only the service thread touches.
///
/// Threads. `run()` is the service thread: it alone calls lws (callbacks arrive on it), and it
/// alone reads or writes the fields marked *service thread*. Other threads only change `table`
/// and `lifecycle` (each a `Locked`) and call `lws_cancel_service`, the one lws function that is
/// safe from any thread; they do so while holding the table lock and only before the table is
/// marked stopped, so the context is still alive. The handler is never called with a lock held.
///
/// Ownership. The lws context user pointer is `Unmanaged.passUnretained(self)`: this object
/// outlives the context because it destroys the context itself (at the end of `run()`, or in
/// `deinit` if the thread never started), and `run()` keeps `self` alive while it runs. The
/// per-session lws user area holds `Unmanaged<Session>` pointers, unretained: `sessions` owns
/// each `Session` from ESTABLISHED until CLOSED, where the pointer is cleared first.
final class ServiceLoop: @unchecked Sendable {
    // @unchecked Sendable: the mutable fields below are confined to the service thread (or to
    // the creating thread before it starts); shared state is in `Locked`s.

    enum Lifecycle { case created, running, finished }

    let configuration: Configuration
    let handler: any WebSocketServerHandler
    let table: Locked<ConnectionTable>
    private let lifecycle = Locked<Lifecycle>(.created)
    private let thread = ServiceThread(name: "tabd-lws")
    /// Set once in `init`, immutable afterwards (nil only while `init` runs).
    private(set) var lws: LWSContext!
    /// Exact paths answered by the handler.
    let dynamicPaths: Set<String>
    /// HTTP requests on dynamic paths not answered yet (ServiceLoop+HTTP.swift).
    let http = HTTPExchanges()

    // Service thread only.
    var sessions: [ConnectionID: Session] = [:]
    var batch: [OutgoingFrame] = []
    let scratch: UnsafeMutableRawBufferPointer
    /// The upgrade accepted last, to reuse at ESTABLISHED (same lws call chain).
    var lastUpgrade: (wsi: OpaquePointer, request: UpgradeRequest)?

    /// Bytes gathered from a connection's queue for one write.
    static let writeBudget = 16 * 1024
    /// Writes per writable callback before yielding to other connections.
    static let maxWritesPerCallback = 8
    /// Accepted connections whose first request is not complete yet (see `track`).
    var awaitingRequest = Set<OpaquePointer>()
    /// Connections that ended before their first request was complete.
    let incompleteRequests = Atomic<Int>(0)
    /// When the last sweep for connections lws failed ran (uptime ns).
    var lastFailSweep: UInt64 = 0
    static let failSweepNanoseconds: UInt64 = 200_000_000
    /// Wakes the service thread for the sweep while it runs.
    private let sweepTimer = Locked<(any DispatchSourceTimer)?>(nil)

    /// Seconds a closing connection gets to take its close frame before it is dropped.
    static let closeTimeoutSeconds: Int32 = 5

    init(configuration: Configuration, handler: any WebSocketServerHandler) throws(WebSocketServerError) {
        try configuration.validate()
        self.configuration = configuration
        self.handler = handler
        self.table = Locked(ConnectionTable(queueLimit: configuration.queueLimit))
        self.dynamicPaths = Set(configuration.dynamicPaths)
        self.scratch = .allocate(byteCount: Self.writeBudget, alignment: 16)
        batch.reserveCapacity(256)
        tabd_ignore_sigpipe()
        // Every stored property is set, so a throw here still runs deinit (which frees scratch).
        lws = try LWSContext(configuration: configuration, user: Unmanaged.passUnretained(self).toOpaque())
    }

    deinit {
        // Only reached when the service thread never ran (run() retains self) or has finished.
        lws?.destroy()
        scratch.deallocate()
    }

    var port: Int { lws.port }

    // MARK: Any thread

    /// Applies `change` to the table and wakes the service thread if it asks for it.
    func update(_ change: (inout ConnectionTable) -> Bool) {
        table.withLock { table in
            // Under the lock: the context cannot be destroyed meanwhile (see the type's doc).
            if change(&table) { lws_cancel_service(lws.context) }
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
        let timer = DispatchSource.makeTimerSource(queue: .global())
        timer.schedule(deadline: .now() + .nanoseconds(Int(Self.failSweepNanoseconds)), repeating: .nanoseconds(Int(Self.failSweepNanoseconds)))
        timer.setEventHandler { [weak self] in self?.update { $0.wakeForTimers() } }
        timer.resume()
        sweepTimer.withLock { $0 = timer }
        thread.run(context: lws.context, until: { table.withLock { $0.shouldExit } },
                   afterEachPass: { sweepFailedConnections(); handler.serviceCycleEnded() }) {
            sweepTimer.withLock { $0 }?.cancel()
            table.withLock { $0.markStopped() }
            lws.destroy()  // remaining connections are closed and reported through `closed`
            for session in sessions.values {
                handler.disconnected(session.id, code: nil, reason: "server stopped")
            }
            sessions = [:]
            lifecycle.withLock { $0 = .finished }
        }
    }
}

/// One WebSocket connection as the service thread sees it.
final class Session {
    let id: ConnectionID
    let wsi: OpaquePointer
    /// The message being reassembled from fragments and chunks.
    var message: [UInt8] = []
    /// Bytes of an oversized message thrown away so far; nil while the message fits.
    var oversized: Int?
    /// The close this side initiated from the service thread (bad input, table decision).
    var localClose: (code: CloseCode, reason: String)?
    /// The close the peer sent.
    var peerClose: (code: CloseCode?, reason: String)?
    /// Seen closing by lws itself on an earlier sweep (see `sweepFailedConnections`).
    var seenClosingByLWS = false

    init(id: ConnectionID, wsi: OpaquePointer) {
        self.id = id
        self.wsi = wsi
    }
}
