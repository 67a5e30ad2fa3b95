import CWebSockets

/// The protocol callback lws calls, on the service thread, for every socket of the vhost
/// (all of them raw: lws moves bytes, tabd speaks HTTP and WebSocket). A top-level function
/// because `lws_callback_function` must be a C function pointer.
func tabdRawCallback(
    _ wsi: OpaquePointer?,
    _ reason: lws_callback_reasons,
    _ user: UnsafeMutableRawPointer?,
    _ input: UnsafeMutableRawPointer?,
    _ length: Int
) -> Int32 {
    switch reason {
    case LWS_CALLBACK_OPENSSL_LOAD_EXTRA_SERVER_VERIFY_CERTS:
        // While the vhost is created (before `ServiceLoop.lws` is set): `user` is its SSL_CTX.
        guard let wsi, let contextUser = lws_context_user(lws_get_context(wsi)) else { return 1 }
        let loop = Unmanaged<ServiceLoop>.fromOpaque(contextUser).takeUnretainedValue()
        return loop.tls?.configure(serverContext: user) == true ? 0 : 1
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED, LWS_CALLBACK_RAW_ADOPT, LWS_CALLBACK_RAW_RX, LWS_CALLBACK_RAW_WRITEABLE,
        LWS_CALLBACK_RAW_CLOSE, LWS_CALLBACK_RAW_RX_FILE:
        guard let wsi, let contextUser = lws_context_user(lws_get_context(wsi)) else { return 0 }
        let loop = Unmanaged<ServiceLoop>.fromOpaque(contextUser).takeUnretainedValue()
        return loop.handle(wsi, reason, user, UnsafeRawBufferPointer(start: input, count: input == nil ? 0 : length))
    default:
        return 0
    }
}

extension ServiceLoop {
    func handle(_ wsi: OpaquePointer, _ reason: lws_callback_reasons, _ user: UnsafeMutableRawPointer?,
                _ bytes: UnsafeRawBufferPointer) -> Int32 {
        // The context exists (lws calls back while it is being created, before `lws` is set).
        guard lws != nil else { return 0 }
        switch reason {
        case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
            wake()
            return 0
        case LWS_CALLBACK_RAW_RX_FILE:
            if wsi == listenerWSI { acceptConnections() }
            return 0
        case LWS_CALLBACK_RAW_ADOPT:
            return adopted(wsi, user: user)
        case LWS_CALLBACK_RAW_RX:
            guard let connection = connection(user) else { return -1 }
            return received(connection, bytes)
        case LWS_CALLBACK_RAW_WRITEABLE:
            guard let connection = connection(user) else { return 0 }
            return writeable(connection)
        case LWS_CALLBACK_RAW_CLOSE:
            if let connection = connection(user) { closed(connection, user: user) }
            return 0
        default:
            return 0
        }
    }

    /// The connection whose unretained pointer sits in the socket's lws user area.
    private func connection(_ user: UnsafeMutableRawPointer?) -> Connection? {
        guard let raw = user?.load(as: UnsafeMutableRawPointer?.self) else { return nil }
        return Unmanaged<Connection>.fromOpaque(raw).takeUnretainedValue()
    }

    private func received(_ connection: Connection, _ bytes: UnsafeRawBufferPointer) -> Int32 {
        guard !connection.killed else { return -1 }
        if !connection.transportKnown {
            // lws looked at the first bytes: a TLS hello, or plain text it let through.
            connection.transportKnown = true
            if tls != nil {
                connection.plainOnTLSPort = lws_is_ssl(connection.wsi) == 0
                // After a TLS accept lws arms a timeout "to negotiate" that only its own HTTP
                // role clears: on a raw socket it would drop the connection, whatever it does,
                // that many seconds later. The deadlines are tabd's own (TimerWheel).
                lws_set_timeout(connection.wsi, NO_PENDING_TIMEOUT, 0)
            }
        }
        switch connection.phase {
        case .http:
            connection.input.append(bytes)
            readRequests(connection)
            if connection.phase == .http && connection.input.count > Self.maxUnreadInput {
                setReading(connection, paused: true)
            }
        case .webSocket:
            webSocketReceived(connection, bytes)
        case .flushing, .lingering:
            break  // dropped: this side has said all it will
        }
        return connection.killed ? -1 : 0
    }

    private func writeable(_ connection: Connection) -> Int32 {
        guard !connection.killed else { return -1 }
        switch connection.phase {
        case .http:
            httpWriteable(connection)
            return connection.killed ? -1 : 0
        case .lingering:
            return 0
        case .webSocket:
            return webSocketWriteable(connection)
        case .flushing:
            flushed(connection)
            return 0
        }
    }
}
