import CWebSockets
import FoundationEssentials
import Glibc
import Dispatch
import Portable

/// One libwebsockets context with one vhost of raw sockets on one event loop, and the C
/// memory lws points into.
///
/// lws here only moves bytes: it watches the sockets on the loop, reads what arrives and
/// writes (and buffers) what tabd gives it. HTTP and WebSocket are tabd's own
/// (`ServiceLoop`), and so is the listening socket, which lws only watches.
///
/// Ownership: lws keeps pointers to the protocol table and its name for the context's whole
/// life, so this object allocates them and frees them only in `destroy()`, after the
/// context. `destroy()` must run on the service thread (or on any thread if it never started).
final class LWSContext {
    let context: OpaquePointer
    let vhost: OpaquePointer
    let loop: EventLoop
    /// The name sockets are adopted under (our protocol).
    let protocolName: UnsafePointer<CChar>

    private var allocations: [UnsafeMutableRawPointer]
    private var destroyed = false

    /// Bytes lws reads from a socket at once.
    static let readBufferSize = 64 * 1024

    /// Creates the context; `user` becomes the context user pointer (see ServiceLoop).
    /// With `tls`, the vhost has an SSL_CTX (its certificate is set at the
    /// LWS_CALLBACK_OPENSSL_LOAD_EXTRA_SERVER_VERIFY_CERTS callback, see RawCallbacks.swift);
    /// `handshakeSeconds` bounds lws' part of a TLS handshake.
    init(eventLoop: WebSocketEventLoop, logLevel: WebSocketLogLevel,
         logSink: (@Sendable (WebSocketLogLevel, String) -> Void)?, tls: Bool, handshakeSeconds: Int,
         user: UnsafeMutableRawPointer) throws(WebSocketServerError) {
        let loop: EventLoop
        do { loop = try EventLoop(eventLoop) } catch { throw .libwebsocketsFailed(error.message) }
        LWS.setLogging(logLevel, sink: logSink)

        let name = strdup("tabd-raw")!
        // ALPN: tabd speaks HTTP/1.1 only (lws would offer h2, which browsers pick).
        let alpn = strdup("http/1.1")!
        let protocols = UnsafeMutablePointer<lws_protocols>.allocate(capacity: 2)
        protocols.initialize(repeating: lws_protocols(), count: 2)
        protocols[0].name = UnsafePointer(name)
        protocols[0].callback = tabdRawCallback
        protocols[0].per_session_data_size = MemoryLayout<UnsafeMutableRawPointer?>.size
        let allocations = [UnsafeMutableRawPointer(name), UnsafeMutableRawPointer(protocols), UnsafeMutableRawPointer(alpn)]
        func freeAll() { for pointer in allocations { free(pointer) } }

        var info = lws_context_creation_info()
        info.options = UInt64(LWS_SERVER_OPTION_EXPLICIT_VHOSTS)
        if tls { info.options |= tabd_option_ssl_global_init() }
        info.port = CONTEXT_PORT_NO_LISTEN
        // No fd_limit_per_thread: lws sizes its fd table by the open-file limit and finds a
        // socket by indexing it (a smaller limit would make every lookup a scan of the table).
        info.pt_serv_buf_size = UInt32(Self.readBufferSize)
        // lws' own timeouts (a TLS accept): as long as a request may take.
        info.timeout_secs = UInt32(handshakeSeconds)
        info.user = user
        loop.configure(&info)
        guard let context = lws_create_context(&info) else {
            freeAll()
            throw .libwebsocketsFailed(eventLoop == .libuv
                ? "lws_create_context failed (is libwebsockets' libuv plugin, libwebsockets-evlib-uv, installed?)"
                : "lws_create_context failed")
        }
        if let warning = loop.created(context) {
            if let logSink { logSink(.warn, warning) } else { StandardStream.error(("websockets: " + warning + "\n")) }
        }
        var vhostInfo = lws_context_creation_info()
        vhostInfo.options = info.options
        if tls {
            // Plain HTTP to the TLS port reaches tabd, marked as such, to be redirected.
            vhostInfo.options |= tabd_option_vhost_ssl_ctx() | tabd_option_http_on_https()
            vhostInfo.alpn = UnsafePointer(alpn)
        }
        vhostInfo.port = CONTEXT_PORT_NO_LISTEN_SERVER
        vhostInfo.vhost_name = UnsafePointer(name)
        vhostInfo.protocols = UnsafePointer(protocols)
        guard let vhost = lws_create_vhost(context, &vhostInfo) else {
            loop.destroy(context)
            freeAll()
            throw .libwebsocketsFailed(tls ? "lws_create_vhost failed (its TLS context could not be set up)" : "lws_create_vhost failed")
        }
        self.context = context
        self.vhost = vhost
        self.loop = loop
        self.protocolName = UnsafePointer(name)
        self.allocations = allocations
    }

    /// Destroys the context (closing every socket, calling back for each) and frees the C
    /// memory. Idempotent.
    func destroy() {
        guard !destroyed else { return }
        destroyed = true
        loop.destroy(context)
        for pointer in allocations { free(pointer) }
        allocations = []
    }
}
