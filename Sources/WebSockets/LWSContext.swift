import CWebSockets
import Foundation

/// One libwebsockets context with one listening vhost, and the C memory it points into.
///
/// Ownership: lws keeps pointers to the protocol table, the mounts, the retry policy and every
/// string given to it for the context's whole life, so this object allocates them itself and
/// frees them only in `destroy()`, after `lws_context_destroy`. `destroy()` must run on the
/// service thread (or on any thread if the service thread never started).
final class LWSContext {
    let context: OpaquePointer
    let vhost: OpaquePointer
    /// The vhost's protocol entry, for `lws_callback_on_writable_all_protocol_vhost`.
    let wsProtocol: UnsafePointer<lws_protocols>
    /// The port really listened on (resolves port 0).
    let port: Int

    private var allocations: [UnsafeMutableRawPointer]
    private var destroyed = false

    /// Bytes written to one socket per `lws_write` at most before lws buffers the rest.
    static let txPacketSize = 256 * 1024

    /// Creates the context and binds. `user` becomes the context user pointer (see ServiceLoop).
    init(
        configuration config: Configuration,
        user: UnsafeMutableRawPointer
    ) throws(WebSocketServerError) {
        var allocations: [UnsafeMutableRawPointer] = []
        func cString(_ s: String) -> UnsafePointer<CChar> {
            let copy = strdup(s)!
            allocations.append(UnsafeMutableRawPointer(copy))
            return UnsafePointer(copy)
        }
        func freeAll() { for pointer in allocations { free(pointer) } }

        let bindAddress = try Self.bindAddress(config.host)
        let fdLimit = try Self.fileDescriptorLimit(for: config.maxConnections)
        if let webRoot = config.webRoot {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: webRoot, isDirectory: &isDirectory), isDirectory.boolValue
            else { throw .webRootMissing(path: webRoot) }
        }

        LWS.setLogging(config.logLevel, sink: config.logSink)

        // Protocol table: ours, then the zeroed terminator. Our per-session data is one pointer.
        let protocols = UnsafeMutablePointer<lws_protocols>.allocate(capacity: 2)
        allocations.append(UnsafeMutableRawPointer(protocols))
        protocols.initialize(repeating: lws_protocols(), count: 2)
        protocols[0].name = cString(config.subprotocol)
        protocols[0].callback = tabdLWSCallback
        protocols[0].per_session_data_size = MemoryLayout<UnsafeMutableRawPointer?>.size
        protocols[0].tx_packet_size = Self.txPacketSize

        // Mounts: one callback mount per dynamic path or prefix, then the web root at "/".
        var mountList: UnsafeMutablePointer<lws_http_mount>?
        func addMount(_ configure: (inout lws_http_mount) -> Void) {
            let mount = UnsafeMutablePointer<lws_http_mount>.allocate(capacity: 1)
            allocations.append(UnsafeMutableRawPointer(mount))
            mount.initialize(to: lws_http_mount())
            configure(&mount.pointee)
            mount.pointee.mount_next = UnsafePointer(mountList)
            mountList = mount
        }
        if let webRoot = config.webRoot {
            addMount { m in
                m.mountpoint = cString("/")
                m.mountpoint_len = 1
                m.origin = cString(webRoot)
                m.def = cString("index.html")
                m.origin_protocol = UInt8(LWSMPRO_FILE.rawValue)
            }
        }
        // lws matches a mountpoint only up to a "/" or the end of the path, so the prefix
        // "/api/" is mounted as "/api"; the service loop checks the real prefix.
        let mountpoints = Set(config.dynamicPaths + config.dynamicPrefixes.map { String($0.dropLast()) })
        for path in mountpoints.sorted() {
            addMount { m in
                m.mountpoint = cString(path)
                m.mountpoint_len = UInt8(clamping: path.utf8.count)
                m.origin = cString(config.subprotocol)  // the protocol whose callback answers
                m.origin_protocol = UInt8(LWSMPRO_CALLBACK.rawValue)
            }
        }

        let retry = UnsafeMutablePointer<lws_retry_bo_t>.allocate(capacity: 1)
        allocations.append(UnsafeMutableRawPointer(retry))
        retry.initialize(to: lws_retry_bo_t())
        retry.pointee.secs_since_valid_ping = UInt16(config.pingIntervalSeconds)
        retry.pointee.secs_since_valid_hangup = UInt16(config.hangupSeconds)

        var options = UInt64(LWS_SERVER_OPTION_EXPLICIT_VHOSTS)
            | UInt64(LWS_SERVER_OPTION_VALIDATE_UTF8)
            | UInt64(LWS_SERVER_OPTION_FAIL_UPON_UNABLE_TO_BIND)
        if bindAddress.isIPv4 { options |= UInt64(LWS_SERVER_OPTION_DISABLE_IPV6) }
        if config.strictSecurityHeaders {
            options |= UInt64(LWS_SERVER_OPTION_HTTP_HEADERS_SECURITY_BEST_PRACTICES_ENFORCE)
        }

        var info = lws_context_creation_info()
        info.options = options
        info.port = CONTEXT_PORT_NO_LISTEN
        // lws stops accepting when its table is full; the table leaves room for the files
        // the rest of the process opens, so accept() itself never fails with EMFILE (lws
        // 4.1 would then retry it in a loop, and give up on the listening socket).
        info.fd_limit_per_thread = UInt32(clamping: max(32, fdLimit - LWS.reservedFileDescriptors))
        // A connection whose request has not arrived whole by then is dropped.
        info.timeout_secs_ah_idle = UInt32(clamping: config.requestTimeoutSeconds)
        info.user = user
        // info.extensions stays nil: no permessage-deflate.
        guard let context = lws_create_context(&info) else {
            freeAll()
            throw .libwebsocketsFailed("lws_create_context failed")
        }

        info.port = Int32(config.port)
        info.iface = bindAddress.iface.map { cString($0) }
        info.vhost_name = cString("default")
        info.protocols = UnsafePointer(protocols)
        info.mounts = UnsafePointer(mountList)
        info.retry_and_idle_policy = UnsafePointer(retry)
        guard let vhost = lws_create_vhost(context, &info) else {
            lws_context_destroy(context)
            freeAll()
            throw Self.diagnoseBindFailure(host: config.host, port: config.port, address: bindAddress)
        }
        guard let wsProtocol = lws_vhost_name_to_protocol(vhost, protocols[0].name) else {
            lws_context_destroy(context)
            freeAll()
            throw .libwebsocketsFailed("the vhost lost its protocol")
        }
        self.context = context
        self.vhost = vhost
        self.wsProtocol = wsProtocol
        self.port = Int(lws_get_vhost_listen_port(vhost))
        self.allocations = allocations
    }

    /// Destroys the context (closing every connection, calling back for each) and frees the
    /// C memory. Idempotent.
    func destroy() {
        guard !destroyed else { return }
        destroyed = true
        lws_context_destroy(context)
        for pointer in allocations { free(pointer) }
        allocations = []
    }

    // MARK: Configuration helpers

    struct BindAddress {
        /// What lws binds to: nil for every interface.
        var iface: String?
        var isIPv4: Bool
    }

    static func bindAddress(_ host: String) throws(WebSocketServerError) -> BindAddress {
        switch host {
        case "", "*", "0.0.0.0", "::":
            return BindAddress(iface: nil, isIPv4: host == "0.0.0.0")
        case "localhost":
            return BindAddress(iface: "127.0.0.1", isIPv4: true)
        default:
            var v4 = in_addr()
            var v6 = in6_addr()
            if inet_pton(AF_INET, host, &v4) == 1 { return BindAddress(iface: host, isIPv4: true) }
            if inet_pton(AF_INET6, host, &v6) == 1 { return BindAddress(iface: host, isIPv4: false) }
            throw .invalidConfiguration("host \(host) is not an IP address (or localhost, or 0.0.0.0)")
        }
    }

    static func fileDescriptorLimit(for maxConnections: Int?) throws(WebSocketServerError) -> Int {
        do { return try LWS.fileDescriptorLimit(for: maxConnections) } catch {
            throw .fileDescriptorLimitTooLow(limit: error.limit, required: error.required)
        }
    }

    /// lws does not say why a bind failed; try it ourselves to name the cause.
    static func diagnoseBindFailure(host: String, port: Int, address: BindAddress) -> WebSocketServerError {
        let family = address.isIPv4 ? AF_INET : AF_INET6
        let fd = socket(family, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return .libwebsocketsFailed("cannot create a socket: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var result: Int32
        if address.isIPv4 {
            var sa = sockaddr_in()
            sa.sin_family = sa_family_t(AF_INET)
            sa.sin_port = in_port_t(UInt16(port).bigEndian)
            if let iface = address.iface { inet_pton(AF_INET, iface, &sa.sin_addr) }
            result = withUnsafePointer(to: &sa) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        } else {
            var sa = sockaddr_in6()
            sa.sin6_family = sa_family_t(AF_INET6)
            sa.sin6_port = in_port_t(UInt16(port).bigEndian)
            if let iface = address.iface { inet_pton(AF_INET6, iface, &sa.sin6_addr) }
            result = withUnsafePointer(to: &sa) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size))
                }
            }
        }
        if result == 0 && listen(fd, 1) == 0 {
            return .libwebsocketsFailed("could not listen on \(host):\(port) (see the libwebsockets log)")
        }
        let error = errno
        if error == EADDRINUSE { return .addressInUse(host: host, port: port) }
        return .cannotBind(host: host, port: port, reason: String(cString: strerror(error)))
    }
}
