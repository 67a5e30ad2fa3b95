import CWebSockets

/// Which event loop runs a libwebsockets context.
public enum WebSocketEventLoop: String, Sendable, CaseIterable {
    /// libuv (epoll on Linux): a pass costs what its ready sockets cost, whatever the number
    /// of idle ones. lws loads its libuv plugin (Debian's `libwebsockets-evlib-uv`).
    case libuv
    /// libwebsockets' own `poll()` loop: every pass hands the kernel every socket and walks
    /// them all. For comparison only.
    case poll

    /// How tabd names it in its log.
    public var description: String {
        switch self {
        case .libuv: return "libuv (epoll)"
        case .poll: return "poll() (libwebsockets' own loop)"
        }
    }
}

/// The loop a context runs on, driven by the service thread one pass at a time.
///
/// libuv runs as a *foreign* loop: tabd creates it, so lws installs no signal handlers of its
/// own, and tabd drives it (`uv_run(UV_RUN_ONCE)`: one wait for ready sockets, then their
/// callbacks), so the owner can act between passes. Threads: created on any thread, then
/// used by the service thread only.
package final class EventLoop {
    package let kind: WebSocketEventLoop
    private var uv: UnsafeMutablePointer<uv_loop_t>?
    /// The array lws reads the foreign loop from (it must outlive the context).
    private var foreignLoops: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
    /// Where lws writes nil once it has freed the context (`info.pcontext`).
    private let contextSlot: UnsafeMutablePointer<OpaquePointer?>
    /// Keeps lws 4.1 from closing its event pipe's fd a second time on a libuv loop
    /// (`tabd_pipe_guard_arm` in the shim says why).
    private var pipeGuard = tabd_pipe_guard(fd_field: nil)
    private var pipeGuardArmed = false
    /// Whether the guard was armed when the context was made (for tests).
    package private(set) var pipeGuardFound = false

    package init(_ kind: WebSocketEventLoop) throws(EventLoopError) {
        self.kind = kind
        contextSlot = .allocate(capacity: 1)
        contextSlot.initialize(to: nil)
        guard kind == .libuv else { return }
        let loop = UnsafeMutablePointer<uv_loop_t>.allocate(capacity: 1)
        let status = uv_loop_init(loop)
        guard status == 0 else {
            loop.deallocate()
            contextSlot.deallocate()
            throw EventLoopError(message: "uv_loop_init: \(String(cString: uv_strerror(status)))")
        }
        uv = loop
        let loops = UnsafeMutablePointer<UnsafeMutableRawPointer?>.allocate(capacity: 1)
        loops.initialize(to: UnsafeMutableRawPointer(loop))
        foreignLoops = loops
    }

    deinit {
        if let uv {
            // Busy only if the context was never freed (then its handles still point here).
            if uv_loop_close(uv) == 0 { uv.deallocate() }
        }
        foreignLoops?.deallocate()
        contextSlot.deallocate()
    }

    /// Sets the context options and the foreign loop for this kind of loop. Call
    /// `created(_:)` with the context lws made.
    package func configure(_ info: inout lws_context_creation_info) {
        info.pcontext = contextSlot
        guard kind == .libuv else { return }
        info.options |= tabd_option_libuv()
        info.foreign_loops = foreignLoops
    }

    /// Waits for ready sockets (or a wake-up, or lws' next timer) and serves them; false when
    /// the loop failed.
    package func runOnce(_ context: OpaquePointer) -> Bool {
        if let uv {
            _ = uv_run(uv, UV_RUN_ONCE)
            return true
        }
        return lws_service(context, 0) >= 0
    }

    /// The context lws created with these settings (before anything else uses it).
    /// Returns a warning for the log when the libuv loop runs without the pipe guard.
    @discardableResult
    package func created(_ context: OpaquePointer) -> String? {
        contextSlot.pointee = context
        guard uv != nil else { return nil }
        pipeGuardArmed = tabd_pipe_guard_arm(context, &pipeGuard) == 0
        pipeGuardFound = pipeGuardArmed
        return pipeGuardArmed ? nil : "cannot find libwebsockets' event pipe: its fd may be closed twice when this context is destroyed"
    }

    /// Destroys the context, on the service thread, outside any lws callback, with no other
    /// thread calling `lws_cancel_service` any more.
    ///
    /// On a foreign libuv loop, lws 4.1 closes its handles asynchronously: the loop runs until
    /// their close callbacks are done, and then a second `lws_context_destroy` frees the
    /// context (lws never finishes on its own for a foreign loop; it writes nil to
    /// `info.pcontext` once it has). Measured in bench/evloop, checked with ASan and valgrind.
    ///
    /// lws 4.1 closes the event pipe's fd during the first call and again in libuv's close
    /// callback: the pipe guard makes the second close a no-op (another thread may own that
    /// fd number by then).
    package func destroy(_ context: OpaquePointer) {
        lws_context_destroy(context)
        guard let uv else { return }
        if pipeGuardArmed {
            tabd_pipe_guard_disarm(&pipeGuard)
            pipeGuardArmed = false
        }
        var budget = 10_000
        while budget > 0 && uv_run(uv, UV_RUN_NOWAIT) != 0 { budget -= 1 }
        if let left = contextSlot.pointee { lws_context_destroy(left) }
    }
}

/// Why an event loop could not be set up.
package struct EventLoopError: Error, Sendable {
    package let message: String
}
