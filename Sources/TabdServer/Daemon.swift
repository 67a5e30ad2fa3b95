import ArgumentParsing
import Auth
import Cluster
import Coordinator
import Outbox
import Dispatch
import FoundationEssentials
import Glibc
import JetStream
import Locking
import StateStore
import WebSockets

/// A running tabd: its state (a state file, memory, or a cluster's engine), its rooms and
/// its server, started from ``Options``. The `tabd` executable is this plus signals and
/// exit codes; tests start one in-process on port 0.
public final class Daemon: Sendable {
    /// Why tabd could not start: one line for the log (the process exits with 1).
    public struct StartError: Error, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }

    public let options: Options
    public let log: Log
    let registry: RoomRegistry
    let gateway: Gateway
    let server: WebSocketServer
    let store: StateStore?
    let cluster: ClusterNode?
    /// The webhooks (nil without `--webhook`).
    let webhooks: Webhooks?
    /// Cluster: the sweep of clients of dead nodes (cancelled by ``stop(closeTimeout:)``).
    private let clusterSweep: Locked<(any DispatchSourceTimer)?>

    /// The port it listens on (the one picked, for `--port 0`).
    public var port: Int { server.port }

    /// The URL it prints once listening: `http://HOST:PORT/`, or `https://` with TLS.
    public var url: String {
        "\(server.usesTLS ? "https" : "http")://\(options.host.contains(":") ? "[\(options.host)]" : options.host):\(port)/"
    }

    /// Reads the tabs, credentials and web root, opens the state, and starts serving.
    public static func start(_ options: Options, log: Log) async throws(StartError) -> Daemon {
        try await start(options, log: log, clock: SystemRoomClock())
    }

    /// The same, with the rooms' time from `clock` (a test's ``ManualRoomClock``).
    package static func start(_ options: Options, log: Log, clock: any RoomClock) async throws(StartError) -> Daemon {
        let tabs: [TabInfo]
        do { tabs = try options.tabsFile.map { try TabInfo.load(contentsOf: $0) } ?? TabInfo.defaults } catch { throw StartError("\(error)") }
        do { _ = try Coordinator.origin(tabs: tabs) } catch { throw StartError("tabs: \(error.message)") }

        let authenticator: Authenticator
        do { authenticator = try options.authenticator(warn: { log.warn($0) }) } catch { throw StartError(error.message) }
        if let tlsKey = options.tlsKey { options.warnIfOpenToEveryone(tlsKey, "TLS key") { log.warn($0) } }

        let webRoot: String
        switch options.resolvedWebRoot() {
        case let .success(path): webRoot = path
        case let .failure(error): throw StartError(error.message)
        }

        // State: one SQLite file for every room (durable, continues across restarts),
        // memory, or a cluster's engine (NATS JetStream).
        var store: StateStore?
        var stored: [RoomID] = []
        var cluster: ClusterNode?
        // The outbox (what webhooks deliver): in the state file, written in the commits'
        // transactions; in memory with --state :memory:; none in a cluster.
        var outbox: Outbox?
        if !options.cluster.isEmpty {
            let name = options.nodeName ?? "\(ProcessInfo.processInfo.hostName.split(separator: ".").first ?? "node")-\(options.port == 0 ? "p\(getpid())" : String(options.port))"
            // TLS and credentials: their files are read (or found missing) before any connection.
            let security: EngineSecurity
            let trust: EngineTrust
            do {
                security = try options.engineSecurity(warn: { log.warn($0) })
                trust = try options.engineTrust(warn: { log.warn($0) })
            } catch { throw StartError(error.message) }
            let how = security.summary(urls: options.cluster)
            do {
                let node = try ClusterNode(urls: options.cluster, name: name, trust: trust, security: security, shards: options.clusterShards,
                                           placement: options.clusterRooms == "streams" ? .streams : .shards, log: { log.info("cluster: \($0)") })
                cluster = node
                // Every line of a node names it.
                log.setNode(name)
                stored = try node.roomIDs(waitingUpTo: 15)
                log.info("node '\(name)' of a cluster on \(EngineURL.redacted(options.cluster))\(how.isEmpty ? "" : " \(how)"): \(node.replicas) cop\(node.replicas == 1 ? "y" : "ies") of every room, \(stored.count) room\(stored.count == 1 ? "" : "s") stored, \(node.layout.shards) shards, new rooms created in \(node.createsInShards ? "shards" : "streams of their own")")
            } catch {
                cluster?.close()
                throw StartError("\(error)")
            }
        } else if let path = options.resolvedStatePath(webRoot: webRoot) {
            // One that exists already keeps its mode (an older tabd's may be open to all).
            options.warnIfOpenToEveryone(path, "state", also: " (and its -wal and -shm files, if any)") { log.warn($0) }
            do {
                // Only the default place (`.tabd/`) is created; a directory named by --state must exist.
                let opened = try StateStore(options: .init(path: path, resumeWindow: options.resumeWindow, createsDirectory: options.state == nil,
                                                           syncCommits: options.stateSync))
                store = opened
                stored = try await opened.roomIDs()
                if options.keepsOutbox {
                    let kept = Outbox(id: try await opened.outboxID(), limit: options.webhookOutboxBytes, kinds: options.webhookEvents)
                    try await opened.keepOutbox(kept)
                    outbox = kept
                }
            } catch {
                store?.close()
                throw StartError(error.message)
            }
            log.info("state in \(path): \(stored.count) room\(stored.count == 1 ? "" : "s") stored; "
                + (options.stateSync ? "every commit is synced to disk before its acks" : "commits are not synced"))
            if !options.stateSync {
                log.warn("--state-sync off: commits are written but not synced before their acks; an ack survives a crash of tabd, but a power cut or a kernel crash may lose the last acknowledged commands")
            }
        } else {
            log.info("state in memory: nothing is kept when tabd stops")
            if options.keepsOutbox { outbox = Outbox(id: Outbox.newID(), limit: options.webhookOutboxBytes, kinds: options.webhookEvents) }
        }
        if let outbox {
            let f = outbox.figures
            log.info("outbox \(outbox.id) \(store == nil ? "in memory (a restart loses its events)" : "in the state file"): "
                + "\(f.count) event\(f.count == 1 ? "" : "s") held, last position \(f.last), at most \(options.webhookOutboxBytes) bytes")
        }
        var webhooks: Webhooks?
        if let cluster, !options.webhooks.isEmpty {
            do { webhooks = try Webhooks.make(options, cluster: cluster, log: log) } catch {
                cluster.close()
                throw error
            }
        } else if let outbox {
            do { webhooks = try await Webhooks.make(options, outbox: outbox, store: store, log: log) } catch {
                store?.close()
                throw error
            }
        }

        let settings = RoomRegistry.Settings(
            creation: options.rooms, maxRooms: options.maxRooms, idleSeconds: options.roomIdle, template: tabs,
            resumeWindow: options.resumeWindow, rateLimit: options.rateLimit,
            byteRateLimit: options.byteRateLimit, presenceLimit: options.presenceLimit, presenceIntervalMS: options.presenceInterval,
            maxStateBytes: options.maxRoomBytes, streamBytes: options.queueBytes)
        let home = cluster.map { EngineHome(cluster: $0, resumeWindow: settings.resumeWindow, forwarding: options.clusterForwarding) }
        let registry = RoomRegistry(settings: settings, store: store, home: home, existing: stored, metrics: Metrics(), log: log,
                                    clock: clock, outbox: outbox)
        let gateway = Gateway(options: options, auth: authenticator, metrics: registry.metrics, log: log, registry: registry, cluster: cluster,
                              webhooks: webhooks)

        let server: WebSocketServer
        do {
            server = try WebSocketServer(configuration: serverConfiguration(options, webRoot: webRoot, log: log), handler: gateway)
        } catch {
            store?.close()
            cluster?.close()
            throw StartError("cannot start: \(error)")
        }
        registry.attach(server: server, gateway: gateway)
        if let certificate = server.certificate { gateway.fence.certificateNames(certificate.dnsNames) }
        // Cluster: rooms deleted by other nodes close here too; clients of dead nodes leave.
        var clusterSweep: (any DispatchSourceTimer)?
        if let cluster {
            do { clusterSweep = try registry.followCluster(cluster) } catch {
                cluster.close()
                throw StartError("\(error)")
            }
        }
        server.start()
        webhooks?.start()
        let daemon = Daemon(options: options, log: log, registry: registry, gateway: gateway, server: server,
                            store: store, cluster: cluster, clusterSweep: clusterSweep, webhooks: webhooks)
        log.info("network: \(options.eventLoop.description) event loop; HTTP/1.1 and WebSocket read by tabd over libwebsockets' raw sockets")
        if let certificate = server.certificate {
            log.info("TLS 1.2 and later only (plain HTTP to this port is only redirected to https); certificate \(options.tlsCertificate ?? ""): \(certificate)")
            daemon.warnIfExpiring(certificate)
        }
        log.info("serving \(webRoot), rooms \(options.rooms.rawValue), at most \(options.maxRooms); "
            + (authenticator.isOn ? "credentials required (\(authenticator.describe))" : "no credentials required"))
        // systemd (Type=notify): listening, the state loaded, the engine reached.
        SystemdNotify.send("READY=1\nSTATUS=listening on port \(server.port)\nMAINPID=\(getpid())")
        return daemon
    }

    private init(options: Options, log: Log, registry: RoomRegistry, gateway: Gateway, server: WebSocketServer,
                 store: StateStore?, cluster: ClusterNode?, clusterSweep: (any DispatchSourceTimer)?, webhooks: Webhooks?) {
        self.options = options; self.log = log; self.registry = registry; self.gateway = gateway; self.server = server
        self.store = store; self.cluster = cluster; self.clusterSweep = Locked(clusterSweep); self.webhooks = webhooks
    }

    /// Why the state file is written no more (a sync failed, perhaps while stopping), or nil.
    public var stateFileFailure: String? { store?.failure }

    /// Calls `handler` with the reason once this daemon cannot go on: the connection to the
    /// cluster's engine is closed for good (the servers refused the node's credentials while
    /// it reconnected). The executable then stops as a refused start does, with status 1.
    ///
    /// Or the state file can be written no more: a sync of it failed, so what the disk holds
    /// of the last commits is unknown. The commands it covered were refused `unavailable`
    /// and nothing more is written; the executable stops with status 1 for its supervisor
    /// to start it again on what the file really holds.
    public func onFailure(_ handler: @escaping @Sendable (String) -> Void) {
        cluster?.onGiveUp { handler("the engine connection is closed for good: \($0)") }
        store?.onFailure { handler($0) }
    }

    /// The server's settings from the options: limits, timeouts, the event loop, and
    /// libwebsockets' own log lines in tabd's format, at most 20 a second (a peer can make
    /// lws complain once per connection, and its bytes may appear in the lines).
    static func serverConfiguration(_ options: Options, webRoot: String, log: Log) -> Configuration {
        let lwsLogLimit = LineLimit(perSecond: 20)
        let lwsLevel: Configuration.LogLevel = switch options.logLevel {
        case .error: .error
        case .warn, .info: .warn
        case .debug: .debug
        }
        var configuration = Configuration(
            host: options.host, port: options.port, webRoot: webRoot, dynamicPaths: ["/healthz", "/livez", "/readyz", "/metrics"],
            dynamicPrefixes: [RoomsAPI.prefix],
            queueLimit: options.queueLimit, pingIntervalSeconds: options.pingInterval, hangupSeconds: options.pingInterval * 2,
            logLevel: lwsLevel,
            logSink: { level, line in
                let mapped: Log.Level = switch level { case .error: .error; case .warn: .warn; case .info, .debug: .debug }
                guard log.enabled(mapped) else { return }
                switch lwsLogLimit.admit() {
                case let .log(suppressed):
                    if suppressed > 0 { log.warn("libwebsockets: \(suppressed) more lines in the last second not logged") }
                    log.log(mapped, "libwebsockets: \(Log.printable(line, limit: 300))")
                case .drop: break
                }
            },
            maxConnections: options.maxClients,
            eventLoop: options.eventLoop
        )
        configuration.requestTimeoutSeconds = options.requestTimeout
        configuration.queueBytes = options.queueBytes
        configuration.totalQueueBytes = options.queueBytesTotal
        configuration.fitsOpenFileLimit = true
        configuration.tls = options.tls
        // The origins that may open /ws may also import the page's modules (tabd.js, …).
        configuration.moduleOrigins = options.allowOrigins
        // No other site may frame the page (a <meta> cannot say this).
        configuration.fileSecurityPolicy = "frame-ancestors 'self'"
        return configuration
    }

    /// What `SIGHUP` asks for: reading the keys of signed tokens (``reloadTokenKeys()``),
    /// the webhooks' secret file, and the TLS certificate and key again. Handshakes from then on use the new pair;
    /// open connections keep theirs; a bad pair is refused with a log line and the old one
    /// keeps serving. Without TLS it says so. Returns whether a new pair is in use.
    @discardableResult
    public func reload() -> Bool {
        reloadTokenKeys()
        webhooks?.reloadSecret(options.webhookSecretFile)
        do throws(TLSError) {
            guard let certificate = try server.reloadTLS() else {
                log.info("received SIGHUP: tabd serves plain HTTP, so there is no certificate to read again")
                return false
            }
            gateway.fence.certificateNames(certificate.dnsNames)
            log.info("received SIGHUP: TLS certificate and key read again; new connections use \(certificate)")
            warnIfExpiring(certificate)
            return true
        } catch {
            log.error("received SIGHUP: \(error); the certificate in use keeps serving", LogFields(kind: "tls"))
            return false
        }
    }

    /// Reads `--auth-secret-file` and `--auth-keys` again: tokens are checked with the keys
    /// they hold from now on. A connection stays open as long as the token it has (checked
    /// when it came, or last refreshed) is valid. A file that cannot be read or a key that
    /// is wrong is said in the log, and the keys in use stay. Returns whether new keys are
    /// in use.
    @discardableResult
    public func reloadTokenKeys() -> Bool {
        guard gateway.auth.acceptsSignedTokens else { return false }
        do throws(UsageError) {
            guard let keys = try options.tokenKeys() else { return false }
            gateway.auth.replaceKeys(keys)
            let ids = keys.keys.map { key in key.id.map { "'\($0)' (\(key.algorithm.rawValue))" } ?? "the secret file's key (HS256)" }
            log.info("received SIGHUP: token keys read again; \(keys.keys.count) in use: \(ids.joined(separator: ", "))")
            return true
        } catch {
            log.error("received SIGHUP: \(error.message); the token keys in use stay", LogFields(kind: "auth"))
            return false
        }
    }

    /// A certificate that has expired, or will within two weeks (a renewal that did not
    /// happen), is said as a warning.
    private func warnIfExpiring(_ certificate: TLSCertificateInfo) {
        let days = certificate.secondsLeft / 86_400
        if certificate.secondsLeft <= 0 {
            log.warn("the TLS certificate \(options.tlsCertificate ?? "") has EXPIRED: clients refuse it; renew it and send SIGHUP", LogFields(kind: "tls"))
        } else if days < 14 {
            log.warn("the TLS certificate \(options.tlsCertificate ?? "") expires in \(days == 0 ? "less than a day" : "\(days) day\(days == 1 ? "" : "s")"); renew it and send SIGHUP")
        }
    }

    /// Stops cleanly: refuses new work, gives clients `closeTimeout` to take their 1001
    /// (then drops the rest), lets every room write its last batches, and closes the
    /// state. The caller bounds the whole (the executable exits after 4.7 s regardless).
    public func stop(closeTimeout: Duration = .seconds(3)) async {
        SystemdNotify.send("STOPPING=1\nSTATUS=stopping: closing clients, writing the last batches")
        gateway.stopping.store(true, ordering: .relaxed)
        await server.shutdown(code: .goingAway, reason: "tabd stopping", timeout: closeTimeout)
        clusterSweep.withLock { $0?.cancel() }
        await registry.stopAll()
        await webhooks?.stop()
        store?.close()
        cluster?.close()
    }
}
