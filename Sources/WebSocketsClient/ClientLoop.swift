import Locking
import CTLS
import CWebSockets
import FoundationEssentials
import Glibc
import Dispatch
import Synchronization

/// The engine behind `WebSocketClient`: one libwebsockets client context (no listener) with
/// any number of connections, served by one dedicated thread.
///
/// Threads, as in the server's `ServiceLoop`: `run()` is the service thread, the only one that
/// calls lws (callbacks arrive on it) and the only one that touches the fields marked *service
/// thread*. Other threads change `table` (a `Locked`) and call `lws_cancel_service`, under the
/// lock and only until the table is marked `contextGone`. The handler is never called with the
/// lock held.
///
/// Ownership. The context user pointer is `Unmanaged.passUnretained(self)`; `run()` keeps
/// `self` alive until it has destroyed the context. Each connection's lws opaque user data is an
/// unretained `ClientSession` pointer; `sessions` owns the session until the connection is
/// reported closed, when the pointer is cleared first.
final class ClientLoop: @unchecked Sendable {
    // @unchecked Sendable: the mutable fields below are confined to the service thread (or to the
    // creating thread before it starts); shared state is in `Locked`s and an `Atomic`.

    let configuration: ClientConfiguration
    let handler: any WebSocketClientHandler
    let table = Locked(ClientTable())
    private let thread: ServiceThread

    /// Set once in `init`, immutable afterwards (nil only while `init` runs).
    private(set) var context: OpaquePointer!
    let loop: EventLoop
    private var allocations: [UnsafeMutableRawPointer] = []
    /// The keep-alive policy every connection is opened with (freed with `allocations`).
    private let retry: UnsafeMutablePointer<lws_retry_bo_t>
    private var destroyed = false
    /// Why the TLS context could not be set up (set while the context is created).
    var tlsProblem: String?

    // Service thread only.
    private var sessions: [ConnectionID: ClientSession] = [:]
    /// LWS_PRE bytes of headroom, then the message being written (lws masks it in place).
    private var scratch: UnsafeMutableRawBufferPointer
    private let pre = tabd_lws_pre()

    static let protocolName = "tabd-ws-client"

    init(configuration: ClientConfiguration, handler: any WebSocketClientHandler) throws(WebSocketClientError) {
        guard configuration.maxConnections > 0 else { throw .invalidConfiguration("maxConnections must be positive") }
        guard (1...3600).contains(configuration.connectTimeoutSeconds) else {
            throw .invalidConfiguration("connectTimeoutSeconds must be in 1...3600")
        }
        if let keepAlive = configuration.keepAliveSeconds, !(1...65_000).contains(keepAlive) {
            throw .invalidConfiguration("keepAliveSeconds must be in 1...65000")
        }
        self.configuration = configuration
        self.handler = handler
        thread = ServiceThread(name: configuration.threadName, stackSize: 1 << 20)
        do { loop = try EventLoop(configuration.eventLoop) } catch { throw .libwebsocketsFailed(error.message) }
        let fdLimit: Int
        do { fdLimit = try LWS.fileDescriptorLimit(for: configuration.maxConnections) } catch {
            throw .fileDescriptorLimitTooLow(limit: error.limit, required: error.required)
        }
        scratch = .allocate(byteCount: 64 * 1024, alignment: 16)
        if let level = configuration.logLevel { lws_set_log_level(LWS.logMask(level), nil) }
        tabd_ignore_sigpipe()

        // Every connection's keep-alive (lws' "validity" timers); zero hangup: none.
        let retry = UnsafeMutablePointer<lws_retry_bo_t>.allocate(capacity: 1)
        retry.initialize(to: lws_retry_bo_t())
        if let keepAlive = configuration.keepAliveSeconds {
            retry.pointee.secs_since_valid_ping = UInt16(keepAlive)
            retry.pointee.secs_since_valid_hangup = UInt16(keepAlive + 10)
        }
        self.retry = retry
        let protocols = UnsafeMutablePointer<lws_protocols>.allocate(capacity: 2)
        protocols.initialize(repeating: lws_protocols(), count: 2)
        let name = strdup(Self.protocolName)!
        protocols[0].name = UnsafePointer(name)
        protocols[0].callback = tabdLWSClientCallback
        protocols[0].per_session_data_size = 0

        var info = lws_context_creation_info()
        info.port = CONTEXT_PORT_NO_LISTEN
        info.protocols = UnsafePointer(protocols)
        // No fd_limit_per_thread below the open-file limit: lws would then find every socket by
        // a scan of its whole table instead of an index.
        _ = fdLimit
        // TLS for wss:// (the client SSL_CTX is set up at
        // LWS_CALLBACK_OPENSSL_LOAD_EXTRA_CLIENT_VERIFY_CERTS, from `configuration.tls`).
        info.options = tabd_option_ssl_global_init()
        info.timeout_secs = UInt32(configuration.connectTimeoutSeconds)
        info.connect_timeout_secs = UInt32(configuration.connectTimeoutSeconds)
        // info.extensions stays nil: no permessage-deflate.
        // Every stored property is set, so a throw from here on still runs deinit.
        allocations = [UnsafeMutableRawPointer(protocols), UnsafeMutableRawPointer(name), UnsafeMutableRawPointer(retry)]
        info.user = Unmanaged.passUnretained(self).toOpaque()
        loop.configure(&info)
        guard let ctx = lws_create_context(&info).map({ loop.created($0); return $0 }) else {
            destroyed = true
            throw .libwebsocketsFailed(configuration.eventLoop == .libuv
                ? "lws_create_context failed (is libwebsockets' libuv plugin, libwebsockets-evlib-uv, installed?)"
                : "lws_create_context failed")
        }
        context = ctx
        if let tlsProblem { throw .invalidConfiguration("TLS: \(tlsProblem)") }
    }

    deinit {
        // Only reached when the service thread never ran (run() retains self) or has finished.
        destroyContext()
        scratch.deallocate()
    }

    private func destroyContext() {
        if !destroyed {
            destroyed = true
            table.withLock { $0.markContextGone() }
            loop.destroy(context)
        }
        for pointer in allocations { free(pointer) }
        allocations = []
    }

    // MARK: Any thread

    var onServiceThread: Bool { thread.isCurrent }

    /// Applies `change` to the table and wakes the service thread if it asks for it.
    func update<R>(_ change: (inout ClientTable) -> (R, wake: Bool)) -> R {
        table.withLock { table in
            let (result, wake) = change(&table)
            // Under the lock: the context cannot be destroyed meanwhile.
            if wake && !table.contextGone { lws_cancel_service(context) }
            return result
        }
    }

    func start() {
        thread.start { [self] in run() }
    }

    /// From the service thread: ask lws for a writable callback now (no wake-up needed).
    func requestWritableDirectly(_ id: ConnectionID) {
        if let session = sessions[id], let wsi = session.wsi, session.open { lws_callback_on_writable(wsi) }
    }

    /// Returns once the service thread has destroyed the context.
    func finished() async {
        await thread.finishedRunning()
    }

    // MARK: Service thread

    private func run() {
        thread.run(pass: { loop.runOnce(context) }, until: { table.withLock { $0.stopping } }) {
            destroyContext()  // open connections are reported through `closed`
            for session in sessions.values where !session.reported {
                session.reported = true
                handler.closed(session.id, ClientClose(code: nil, reason: "client stopped", wasOpen: session.open))
            }
            sessions = [:]
        }
    }

    func handle(
        _ wsi: OpaquePointer,
        _ reason: lws_callback_reasons,
        _ input: UnsafeMutableRawPointer?,
        _ length: Int
    ) -> Int32 {
        switch reason {
        case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
            wake()
            return 0
        case LWS_CALLBACK_CLIENT_FILTER_PRE_ESTABLISH:
            // The response headers are still there (they are gone by ESTABLISHED).
            guard let session = session(wsi) else { return 0 }
            let n = lws_hdr_total_length(wsi, WSI_TOKEN_PROTOCOL)
            if n > 0 {
                var buffer = [CChar](repeating: 0, count: Int(n) + 1)
                let copied = lws_hdr_copy(wsi, &buffer, Int32(buffer.count), WSI_TOKEN_PROTOCOL)
                if copied > 0 {
                    session.subprotocol = String(decoding: buffer.prefix(Int(copied)).map { UInt8(bitPattern: $0) }, as: UTF8.self)
                }
            }
            return 0
        case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER:
            // `input` is lws' write position in the handshake's buffer, `length` what is left.
            guard let session = session(wsi), let value = session.authorization, let input else { return 0 }
            let position = input.assumingMemoryBound(to: UnsafeMutablePointer<UInt8>?.self)
            guard let start = position.pointee else { return -1 }
            // lws reads the name as a C string: it needs its NUL.
            let name = Array("authorization:".utf8) + [0]
            let failed = name.withUnsafeBufferPointer { n in
                value.withUnsafeBufferPointer { v in
                    lws_add_http_header_by_name(wsi, n.baseAddress, v.baseAddress, Int32(v.count), position, start + length)
                }
            }
            return failed == 0 ? 0 : -1
        case LWS_CALLBACK_CLIENT_ESTABLISHED:
            guard let session = session(wsi) else { return -1 }
            session.open = true
            session.freeStrings()
            handler.opened(session.id, subprotocol: session.subprotocol)
            if table.withLock({ $0.hasOutput(session.id) }) { lws_callback_on_writable(wsi) }
            return 0
        case LWS_CALLBACK_CLIENT_RECEIVE:
            guard let session = session(wsi) else { return -1 }
            return receive(session, wsi, UnsafeRawBufferPointer(start: input, count: input == nil ? 0 : length))
        case LWS_CALLBACK_CLIENT_WRITEABLE:
            guard let session = session(wsi) else { return 0 }
            return writeable(session, wsi)
        case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
            session(wsi)?.peerClose = LWS.parseClose(UnsafeRawBufferPointer(start: input, count: input == nil ? 0 : length))
            return 0
        case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
            var message = input.map { String(cString: $0.assumingMemoryBound(to: CChar.self)) } ?? "connection failed"
            // lws says "connect SSL err 1: …" for a certificate that does not verify: say why.
            if let refused = tabd_tls_verify_error(UnsafeRawPointer(lws_get_ssl(wsi))) {
                message = "TLS: the server's certificate was refused: \(String(cString: refused))"
            }
            // What this handshake left in the thread's error queue is not the next one's.
            tabd_tls_clear_errors()
            let status = Int(lws_http_client_http_response(wsi))
            finish(wsi, failure: message, httpStatus: status > 0 ? status : nil)
            return 0
        case LWS_CALLBACK_CLIENT_CLOSED:
            finish(wsi, failure: nil, httpStatus: nil)
            return 0
        default:
            return 0
        }
    }

    private func session(_ wsi: OpaquePointer) -> ClientSession? {
        guard let raw = lws_get_opaque_user_data(wsi) else { return nil }
        return Unmanaged<ClientSession>.fromOpaque(raw).takeUnretainedValue()
    }

    private func wake() {
        let work = table.withLock { $0.takeWakeWork() }
        for connect in work.connects { open(connect) }
        for id in work.writable { requestWritableDirectly(id) }
    }

    private func open(_ request: ClientTable.Connect) {
        let session = ClientSession(id: request.id)
        session.authorization = request.authorization.map { Array($0.utf8) }
        sessions[request.id] = session
        var info = lws_client_connect_info()
        info.context = context
        info.address = session.keep(request.url.host)
        info.port = Int32(request.url.port)
        info.path = session.keep(request.url.path)
        info.host = session.keep(request.url.hostHeader)
        info.origin = request.origin.map { session.keep($0) }
        info.protocol = request.subprotocols.map { session.keep($0) }
        info.local_protocol_name = session.keep(Self.protocolName)
        // A redirect is an answer, not a new address to try: it fails the connection with its
        // status (a plain ws:// to a TLS tabd gets 301 to https, which the caller reports).
        info.ssl_connection = Int32(LCCSCF_HTTP_NO_FOLLOW_REDIRECT.rawValue) | (request.url.secure ? Int32(LCCSCF_USE_SSL.rawValue) : 0)
        info.retry_and_idle_policy = UnsafePointer(retry)
        info.opaque_user_data = Unmanaged.passUnretained(session).toOpaque()
        let wsi = lws_client_connect_via_info(&info)
        if let wsi, !session.reported {
            session.wsi = wsi
        } else if !session.reported {
            // Failed before any callback (no address, no socket).
            report(session, ClientClose(code: nil, reason: "cannot connect to \(request.url)", wasOpen: false))
        }
    }

    private func receive(_ session: ClientSession, _ wsi: OpaquePointer, _ bytes: UnsafeRawBufferPointer) -> Int32 {
        let final = lws_is_final_fragment(wsi) != 0
        let binary = lws_frame_is_binary(wsi) != 0
        if final && session.message.isEmpty {
            handler.received(session.id, message: bytes, binary: binary)
        } else {
            session.message.append(contentsOf: bytes)
            if final {
                let message = session.message
                session.message.removeAll(keepingCapacity: message.count <= 65_536)
                message.withUnsafeBytes { handler.received(session.id, message: $0, binary: binary) }
            }
        }
        return 0
    }

    private func writeable(_ session: ClientSession, _ wsi: OpaquePointer) -> Int32 {
        // This side's close is out: it waits for the server's answer.
        if session.closeSent { return 0 }
        while true {
            switch table.withLock({ $0.takeOutput(session.id) }) {
            case .unknown:
                return -1
            case .idle:
                return 0
            case let .close(request):
                session.localClose = request
                if request.abort {
                    tabd_lws_abort_socket(wsi)
                    return -1
                }
                // The close frame is written here, not left to lws: lws 4.1 on libuv does not
                // send the close it prepares when a callback returns -1. lws then reads the
                // server's answer as the end of the closing handshake; a server that never
                // answers is dropped after 5 s.
                let frame = ControlFrame.masked(ControlFrame.close(request.code.rawValue, reason: request.reason),
                                                key: UInt32.random(in: 0...UInt32.max))
                if frame.withUnsafeBytes({ tabd_lws_write_raw(wsi, $0.baseAddress, $0.count) }) < 0 { return -1 }
                session.closeSent = true
                tabd_lws_kill_after(wsi, 5)
                return 0
            case let .message(message, more):
                if scratch.count < pre + message.count {
                    scratch.deallocate()
                    scratch = .allocate(byteCount: pre + message.count, alignment: 16)
                }
                message.withUnsafeBytes { bytes in
                    if let base = bytes.baseAddress {
                        scratch.baseAddress!.advanced(by: pre).copyMemory(from: base, byteCount: bytes.count)
                    }
                }
                let start = scratch.baseAddress!.advanced(by: pre).assumingMemoryBound(to: UInt8.self)
                if tabd_lws_write_text(wsi, start, message.count) < 0 { return -1 }
                guard more else { return 0 }
                if lws_send_pipe_choked(wsi) != 0 || lws_partial_buffered(wsi) != 0 {
                    lws_callback_on_writable(wsi)
                    return 0
                }
            }
        }
    }

    private func finish(_ wsi: OpaquePointer, failure: String?, httpStatus: Int?) {
        guard let session = session(wsi) else { return }
        lws_set_opaque_user_data(wsi, nil)
        let close: ClientClose
        if let failure {
            close = ClientClose(code: nil, reason: failure, wasOpen: session.open, httpStatus: httpStatus)
        } else if let peer = session.peerClose {
            close = ClientClose(code: peer.code, reason: peer.reason, wasOpen: session.open)
        } else if let local = session.localClose {
            close = ClientClose(code: local.abort ? nil : local.code.rawValue, reason: local.abort ? "aborted" : local.reason,
                                wasOpen: session.open)
        } else {
            close = ClientClose(code: nil, reason: "connection lost", wasOpen: session.open)
        }
        report(session, close)
    }

    private func report(_ session: ClientSession, _ close: ClientClose) {
        guard !session.reported else { return }
        session.reported = true
        session.wsi = nil
        session.freeStrings()
        sessions[session.id] = nil
        _ = table.withLock { $0.remove(session.id) }
        handler.closed(session.id, close)
    }
}

/// One client connection as the service thread sees it.
final class ClientSession {
    let id: ConnectionID
    var wsi: OpaquePointer?
    var open = false
    var subprotocol: String?
    /// The `Authorization` header to send with the handshake, if any.
    var authorization: [UInt8]?
    var reported = false
    var message: [UInt8] = []
    var localClose: ClientTable.CloseRequest?
    /// This side's close frame is written.
    var closeSent = false
    var peerClose: (code: UInt16?, reason: String)?
    /// C strings handed to `lws_client_connect_via_info`, kept until the handshake is done.
    private var strings: [UnsafeMutablePointer<CChar>] = []

    init(id: ConnectionID) { self.id = id }

    deinit { freeStrings() }

    func keep(_ s: String) -> UnsafePointer<CChar> {
        let copy = strdup(s)!
        strings.append(copy)
        return UnsafePointer(copy)
    }

    func freeStrings() {
        for s in strings { free(s) }
        strings = []
    }
}

/// The protocol callback of the client context. A top-level function because
/// `lws_callback_function` must be a C function pointer.
func tabdLWSClientCallback(
    _ wsi: OpaquePointer?,
    _ reason: lws_callback_reasons,
    _ user: UnsafeMutableRawPointer?,
    _ input: UnsafeMutableRawPointer?,
    _ length: Int
) -> Int32 {
    switch reason {
    case LWS_CALLBACK_OPENSSL_LOAD_EXTRA_CLIENT_VERIFY_CERTS:
        // While the context is created: `user` is the client SSL_CTX.
        guard let wsi, let contextUser = lws_context_user(lws_get_context(wsi)) else { return 0 }
        let loop = Unmanaged<ClientLoop>.fromOpaque(contextUser).takeUnretainedValue()
        loop.tlsProblem = loop.configuration.tls.configure(user)
        return 0
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED, LWS_CALLBACK_CLIENT_FILTER_PRE_ESTABLISH, LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER,
        LWS_CALLBACK_CLIENT_ESTABLISHED, LWS_CALLBACK_CLIENT_RECEIVE,
        LWS_CALLBACK_CLIENT_WRITEABLE, LWS_CALLBACK_WS_PEER_INITIATED_CLOSE, LWS_CALLBACK_CLIENT_CONNECTION_ERROR,
        LWS_CALLBACK_CLIENT_CLOSED:
        guard let wsi, let contextUser = lws_context_user(lws_get_context(wsi)) else { return 0 }
        let loop = Unmanaged<ClientLoop>.fromOpaque(contextUser).takeUnretainedValue()
        return loop.handle(wsi, reason, input, length)
    default:
        return 0
    }
}
