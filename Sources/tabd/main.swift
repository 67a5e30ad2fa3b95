import Auth
import Cluster
import Coordinator
import Dispatch
import Foundation
import StateStore
import WebSockets

// tabd: parse options, open the state file, serve rooms, stop cleanly on SIGINT/SIGTERM.

let arguments = Array(CommandLine.arguments.dropFirst())
let environment = ProcessInfo.processInfo.environment
if arguments.first == "token" {
    let (text, code) = TokenCommand.run(Array(arguments.dropFirst()), environment: environment)
    if code == 0 { print(text) } else { FileHandle.standardError.write(Data((text + "\n").utf8)) }
    exit(code)
}

let options: Options
switch Options.parse(arguments, environment: environment) {
case let .run(o): options = o
case let .exit(text, code):
    if code == 0 { print(text) } else { FileHandle.standardError.write(Data((text + "\n").utf8)) }
    exit(code)
}

let log = Log(level: options.logLevel, format: options.logFormat)
let termination = TerminationSignals()
// A file-size limit (ulimit -f) must fail a write with an error, not kill the daemon.
signal(SIGXFSZ, SIG_IGN)

func fail(_ message: String) -> Never {
    log.error(message)
    exit(1)
}

let tabs: [TabInfo]
do { tabs = try options.tabsFile.map { try TabInfo.load(contentsOf: $0) } ?? TabInfo.defaults } catch { fail("\(error)") }
do { _ = try Coordinator.origin(tabs: tabs) } catch { fail("tabs: \(error.message)") }

let authenticator: Authenticator
do { authenticator = try options.authenticator(warn: { log.warn($0) }) } catch { fail(error.message) }

let webRoot: String
switch options.resolvedWebRoot() {
case let .success(path): webRoot = path
case let .failure(error): fail(error.message)
}

// State: one SQLite file for every room (durable, continues across restarts), memory, or
// a cluster's engine (NATS JetStream).
let store: StateStore?
var stored: [RoomID] = []
var cluster: ClusterNode?
if !options.cluster.isEmpty {
    store = nil
    let name = options.nodeName ?? "\(ProcessInfo.processInfo.hostName.split(separator: ".").first ?? "node")-\(options.port == 0 ? "p\(getpid())" : String(options.port))"
    do {
        cluster = try ClusterNode(urls: options.cluster, name: name, log: { log.info("cluster: \($0)") })
        stored = try cluster!.roomIDs()
    } catch { fail("\(error)") }
    log.info("node '\(name)' of a cluster on \(options.cluster.joined(separator: ",")): \(cluster!.replicas) cop\(cluster!.replicas == 1 ? "y" : "ies") of every room, \(stored.count) room\(stored.count == 1 ? "" : "s") stored")
} else if let path = options.resolvedStatePath(webRoot: webRoot) {
    do {
        // Only the default place (`.tabd/`) is created; a directory named by --state must exist.
        store = try StateStore(options: .init(path: path, resumeWindow: options.resumeWindow, createsDirectory: options.state == nil))
        stored = try await store!.roomIDs()
    } catch { fail(error.message) }
    log.info("state in \(path): \(stored.count) room\(stored.count == 1 ? "" : "s") stored")
} else {
    store = nil
    log.info("state in memory: nothing is kept when tabd stops")
}

let settings = RoomRegistry.Settings(
    creation: options.rooms, maxRooms: options.maxRooms, idleSeconds: options.roomIdle, template: tabs,
    resumeWindow: options.resumeWindow, rateLimit: options.rateLimit)
let registry = RoomRegistry(settings: settings, store: store, cluster: cluster, existing: stored, metrics: Metrics(), log: log)
let metrics = registry.metrics
let gateway = Gateway(options: options, auth: authenticator, metrics: metrics, log: log, registry: registry)

let server: WebSocketServer
let lwsLogLimit = LineLimit(perSecond: 20)
do {
    let lwsLevel: Configuration.LogLevel = switch options.logLevel {
    case .error: .error
    case .warn, .info: .warn
    case .debug: .debug
    }
    var configuration = Configuration(
        host: options.host, port: options.port, webRoot: webRoot, dynamicPaths: ["/healthz", "/metrics"],
        dynamicPrefixes: [RoomsAPI.prefix],
        queueLimit: options.queueLimit, pingIntervalSeconds: options.pingInterval, hangupSeconds: options.pingInterval * 2,
        logLevel: lwsLevel,
        logSink: { level, line in
            // libwebsockets' own lines, in tabd's format (a peer's bytes may appear in them),
            // at most 20 a second: a peer can make lws complain once per connection.
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
    configuration.fitsOpenFileLimit = true
    server = try WebSocketServer(configuration: configuration, handler: gateway)
} catch {
    fail("cannot start: \(error)")
}
registry.attach(server: server, gateway: gateway)
// Cluster: rooms deleted by other nodes close here too; clients of dead nodes leave.
let clusterSweep: (any DispatchSourceTimer)?
if let cluster {
    do { clusterSweep = try registry.followCluster(cluster) } catch { fail("\(error)") }
} else {
    clusterSweep = nil
}

server.start()
// The first line on stdout, written unbuffered: scripts wait for it.
let listening = "tabd listening on http://\(options.host.contains(":") ? "[\(options.host)]" : options.host):\(server.port)/\n"
FileHandle.standardOutput.write(Data(listening.utf8))
log.info("network: \(options.eventLoop.description) event loop; HTTP/1.1 and WebSocket read by tabd over libwebsockets' raw sockets")
log.info("serving \(webRoot), rooms \(options.rooms.rawValue), at most \(options.maxRooms); "
    + (authenticator.isOn ? "credentials required (\(authenticator.describe))" : "no credentials required"))

let received = await termination.mailbox.wait()
log.info("received signal \(received), stopping: closing every client with 1001")
gateway.stopping.store(true, ordering: .relaxed)
// A stop takes at most 5 s, whatever the load: clients get 3 s to take their 1001 (then the
// rest are dropped), rooms the time left to settle; past that, tabd exits as it is (every
// acknowledged command is in the state file already).
DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(4_700)) {
    log.warn("stopping took longer than 5 s: exiting without waiting for the rest")
    _exit(0)
}
await server.shutdown(code: .goingAway, reason: "tabd stopping", timeout: .seconds(3))
await registry.stopAll()
store?.close()
cluster?.close()
log.info("stopped")
exit(0)
