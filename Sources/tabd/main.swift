import Coordinator
import Dispatch
import Foundation
import StateStore
import WebSockets

// tabd: parse options, build the coordinator, serve, stop cleanly on SIGINT/SIGTERM.

let options: Options
switch Options.parse(Array(CommandLine.arguments.dropFirst())) {
case let .run(o): options = o
case let .exit(text, code):
    if code == 0 { print(text) } else { FileHandle.standardError.write(Data((text + "\n").utf8)) }
    exit(code)
}

let log = Log(level: options.logLevel)
let termination = TerminationSignals()
// A file-size limit (ulimit -f) must fail a write with an error, not kill the daemon.
signal(SIGXFSZ, SIG_IGN)

func fail(_ message: String) -> Never {
    log.error(message)
    exit(1)
}

let tabs: [TabInfo]
do { tabs = try options.tabsFile.map { try TabInfo.load(contentsOf: $0) } ?? TabInfo.defaults } catch { fail("\(error)") }

let webRoot: String
switch options.resolvedWebRoot() {
case let .success(path): webRoot = path
case let .failure(error): fail(error.message)
}

// State: an SQLite file (durable, continues across restarts) or memory.
let configuration = Coordinator.Configuration(resumeWindow: options.resumeWindow)
let coordinator: Coordinator
let store: StateStore?
if let path = options.resolvedStatePath(webRoot: webRoot) {
    do { store = try StateStore(options: .init(path: path, resumeWindow: options.resumeWindow), tabs: tabs) } catch { fail(error.message) }
    coordinator = Coordinator(restoring: store!.loaded, durability: store!, configuration: configuration)
    do { try await coordinator.start() } catch { fail("state file '\(path)': \(error.message)") }
    log.info("state in \(path): epoch \(coordinator.epoch), continuing at seq \(store!.loaded.snapshot.seq)")
} else {
    store = nil
    do { coordinator = try Coordinator(tabs: tabs, configuration: configuration) } catch { fail("tabs: \(error.message)") }
    log.info("state in memory: nothing is kept when tabd stops")
}

let metrics = Metrics()
metrics.started(seq: await coordinator.currentSeq, scrollToTop: coordinator.counter.value)
let inbox = Inbox<Gateway.Input>()
let gateway = Gateway(options: options, metrics: metrics, log: log, inbox: inbox)

let server: WebSocketServer
do {
    let lwsLevel: Configuration.LogLevel = switch options.logLevel {
    case .error: .error
    case .warn, .info: .warn
    case .debug: .debug
    }
    server = try WebSocketServer(configuration: Configuration(
        host: options.host, port: options.port, webRoot: webRoot, dynamicPaths: ["/healthz", "/metrics"],
        queueLimit: options.queueLimit, pingIntervalSeconds: options.pingInterval, hangupSeconds: options.pingInterval * 2,
        logLevel: lwsLevel, maxConnections: options.maxClients
    ), handler: gateway)
} catch {
    fail("cannot start: \(error)")
}

// Every batch is encoded once (the state store has usually done it already) and handed
// to every connection as the same bytes, with the answers it acknowledges.
await Dispatcher.attach(to: coordinator, server: server, metrics: metrics, log: log)

let dispatcher = Dispatcher(coordinator: coordinator, server: server, gateway: gateway)
let dispatching = Task { await dispatcher.run(inbox) }

server.start()
// The first line on stdout, written unbuffered: scripts wait for it.
let listening = "tabd listening on http://\(options.host.contains(":") ? "[\(options.host)]" : options.host):\(server.port)/\n"
FileHandle.standardOutput.write(Data(listening.utf8))
log.info("serving \(webRoot), epoch \(coordinator.epoch)")

let received = await termination.mailbox.wait()
log.info("received signal \(received), stopping: closing every client with 1001")
gateway.stopping.store(true, ordering: .relaxed)
await server.shutdown(code: .goingAway, reason: "tabd stopping", timeout: .seconds(5))
inbox.finish()
await dispatching.value
store?.close()
let finalSeq = await coordinator.currentSeq
log.info("stopped at seq \(finalSeq)")
exit(0)
