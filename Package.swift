// swift-tools-version: 6.0
import PackageDescription

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "tabd",
    products: [
        .library(name: "TabdProtocol", targets: ["TabdProtocol"]),
        .library(name: "Coordinator", targets: ["Coordinator"]),
        .library(name: "WebSockets", targets: ["WebSockets"]),
        .library(name: "WebSocketsClient", targets: ["WebSocketsClient"]),
        .library(name: "TabdClient", targets: ["TabdClient"]),
        .library(name: "TabdObservation", targets: ["TabdObservation"]),
        .library(name: "TabdServer", targets: ["TabdServer"]),
        .executable(name: "tabd", targets: ["tabd"]),
        .executable(name: "tabctl", targets: ["tabctl"]),
        .executable(name: "tabbench", targets: ["tabbench"]),
    ],
    targets: [
        // C at the edge: Debian's libwebsockets and the libuv loop it runs on (its evlib-uv
        // plugin), seen only by the three WebSocket modules.
        .systemLibrary(
            name: "CWebSockets",
            pkgConfig: "libwebsockets",
            providers: [.apt(["libwebsockets-dev", "libwebsockets-evlib-uv", "libuv1-dev"])]
        ),
        // Debian's SQLite, seen only by the StateStore module.
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        // Debian's OpenSSL libcrypto (libssl-dev), seen only by the Auth module.
        .systemLibrary(
            name: "CCrypto",
            pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]
        ),
        // SIGINT and SIGTERM for the daemon: a handler that only writes to a pipe, read by a
        // thread (C, because a signal handler must be async-signal-safe).
        .target(name: "CSignals"),
        // TLS over Debian's OpenSSL (libssl-dev): the server's certificate store, replaced on
        // SIGHUP; TLS 1.2 and later; a client's trust (the system's store and an extra CA).
        .target(name: "CTLS", linkerSettings: [.linkedLibrary("ssl"), .linkedLibrary("crypto")]),
        // The web root's files served as a CDN would: SHA-256 for their validators (OpenSSL's
        // libcrypto) and gzip (Debian's zlib1g-dev, which libwebsockets-dev brings).
        .target(name: "CWebContent", linkerSettings: [.linkedLibrary("z"), .linkedLibrary("crypto")]),
        // What this build is: the VERSION file (read by the compiler) and the commit `make`
        // writes beside it (scripts/build-info); BuildInfo gives both to Swift.
        .target(name: "CBuildInfo"),
        .target(name: "BuildInfo", dependencies: ["CBuildInfo"], swiftSettings: strict),
        // Who may do what: signed tokens (HS256 JWTs), roles, the operator token.
        .target(name: "Auth", dependencies: ["TabdProtocol", "CCrypto", "Locking", "Portable"], swiftSettings: strict),
        // Debian's NATS C client (libnats-dev), seen only by the JetStream module.
        .systemLibrary(
            name: "CNATS",
            pkgConfig: "libnats",
            providers: [.apt(["libnats-dev"])]
        ),
        // The engine of cluster mode: NATS JetStream streams, compare-and-set publishes,
        // ordered consumers (docs/CLUSTER.md).
        .target(name: "JetStream", dependencies: ["CNATS", "Locking", "Portable"], swiftSettings: strict),
        // A tabd node of a cluster: rooms as streams in the engine, their durability
        // (compare-and-set appends) and their followers (ordered consumers).
        .target(name: "Cluster", dependencies: ["Auth", "Coordinator", "JetStream", "Locking", "Outbox", "Portable"], swiftSettings: strict),
        // Durable state: the event log and snapshots in an SQLite file, group commit.
        .target(name: "StateStore", dependencies: ["Coordinator", "CSQLite", "Locking", "Outbox", "Portable", "Measuring"], swiftSettings: strict),
        // The events webhooks deliver, in order, bounded: what the state file's writer and
        // the daemon share.
        .target(name: "Outbox", dependencies: ["TabdProtocol", "Portable"], swiftSettings: strict),
        // Command lines read one argument at a time, for every executable (one UsageError).
        .target(name: "ArgumentParsing", swiftSettings: strict),
        // A lock ThreadSanitizer can see, a condition and threads over pthreads, shared by every module.
        .target(name: "CThreads"),
        .target(name: "Locking", dependencies: ["CThreads"], swiftSettings: strict),
        // What the modules would otherwise take from Foundation (whose ICU data would weigh
        // tens of megabytes in the executables): trimming, hex, decimals, the standard streams.
        .target(name: "Portable", swiftSettings: strict),
        // Histograms of durations for /metrics, shared by the state file's writer and the daemon.
        .target(name: "Measuring", dependencies: ["Locking"], swiftSettings: strict),
        // The wire's values, shared by the server and the clients: commands, events, snapshots,
        // JSON, the fold. No actor, no networking.
        .target(name: "TabdProtocol", dependencies: ["Locking"], swiftSettings: strict),
        // The heart: the room's actors, its lifecycle rules, sequencing. No networking.
        .target(name: "Coordinator", dependencies: ["TabdProtocol", "Locking"], swiftSettings: strict),
        // libwebsockets wrapped for Swift, in three modules, the only ones that import CWebSockets:
        // what the server and the client share (the service thread, close frames, limits),
        .target(name: "WebSocketEngine", dependencies: ["CWebSockets", "Locking", "Portable"], swiftSettings: strict),
        // the server (HTTP + WebSocket), which is all the daemon links,
        .target(name: "WebSockets", dependencies: ["WebSocketEngine", "CWebSockets", "CTLS", "CWebContent", "Locking", "Portable"], swiftSettings: strict),
        // and the client (many connections on one thread) for tests, tools and client libraries.
        .target(name: "WebSocketsClient", dependencies: ["WebSocketEngine", "CWebSockets", "CTLS", "Locking", "Portable"], swiftSettings: strict),
        // The rules a stream of batches must keep, checked from outside: for tests and tools.
        .target(name: "Conformance", dependencies: ["Coordinator"], swiftSettings: strict),
        // The daemon as a library: the gateway (who may connect, the frame reader), rooms and
        // their registry, the HTTP API, options, metrics, logging; tests drive it in-process.
        .target(name: "TabdServer", dependencies: ["ArgumentParsing", "Auth", "BuildInfo", "Cluster", "Coordinator", "JetStream", "Locking", "Outbox", "StateStore", "WebSockets", "WebSocketsClient", "Portable", "Measuring"], swiftSettings: strict),
        // The daemon's executable: main, signals, exit codes.
        .executableTarget(name: "tabd", dependencies: ["TabdServer", "CSignals", "Locking", "Portable"], swiftSettings: strict),
        // The Swift client library: one room's state kept by the server's own fold, typed
        // commands, reconnects with resume; transports behind a protocol (libwebsockets here).
        .target(name: "TabdClient", dependencies: ["TabdProtocol", "CTLS", "WebSocketEngine", "WebSocketsClient", "Locking"], swiftSettings: strict),
        // A room as an observable model on the main actor (Observation), on TabdClient: what
        // a SwiftUI tab bar binds to (docs/CLIENTS.md).
        .target(name: "TabdObservation", dependencies: ["TabdClient", "TabdProtocol"], swiftSettings: strict),
        // The command line over TabdClient: watch, state, commands, rooms.
        .executableTarget(name: "tabctl", dependencies: ["ArgumentParsing", "BuildInfo", "TabdClient", "Portable"], swiftSettings: strict),
        // Load and stress clients for tabd: stream checks, random commands, frame scanning.
        .target(name: "TabdLoad", dependencies: ["Coordinator", "Conformance", "WebSocketsClient"], swiftSettings: strict),
        // The load tool: many connections, commands, stream checks, latency (docs/BENCHMARKS.md).
        .executableTarget(name: "tabbench", dependencies: ["ArgumentParsing", "Coordinator", "Conformance", "WebSockets", "WebSocketsClient", "TabdLoad", "TabdClient"], swiftSettings: strict),
        .testTarget(name: "CoordinatorTests", dependencies: ["Coordinator", "Conformance", "Locking", "TabdProtocol"], swiftSettings: strict),
        // TabdClient against real tabd processes (needs the tabd product built).
        .testTarget(name: "TabdClientTests", dependencies: ["TabdClient", "TabdObservation", "TabdLoad", "Conformance", "Locking", "Auth", "TabdProtocol"],
                    swiftSettings: strict),
        // The observable model against real tabds (processes), with Observation's tracking.
        .testTarget(name: "TabdObservationTests", dependencies: ["TabdObservation", "TabdClient", "TabdLoad", "Conformance", "Coordinator", "Locking", "TabdProtocol"],
                    swiftSettings: strict),
        // The daemon's library in-process: its pure rules, and whole daemons on port 0.
        .testTarget(name: "TabdServerTests", dependencies: ["TabdServer", "Outbox", "ArgumentParsing", "Auth", "Coordinator", "JetStream", "WebSockets", "WebSocketsClient", "TabdClient", "Locking", "TabdProtocol"],
                    swiftSettings: strict),
        .testTarget(name: "AuthTests", dependencies: ["Auth", "Coordinator", "TabdProtocol"], swiftSettings: strict),
        // Cluster nodes over a real NATS JetStream server (nats-server, from scripts/install-deps).
        .testTarget(name: "ClusterTests", dependencies: ["Auth", "Cluster", "Coordinator", "Conformance", "JetStream", "Locking", "TabdProtocol"], swiftSettings: strict),
        .testTarget(name: "StateStoreTests", dependencies: ["StateStore", "Coordinator", "Conformance", "TabdProtocol"], swiftSettings: strict),
        .testTarget(name: "WebSocketsTests", dependencies: ["WebSockets", "WebSocketsClient", "Locking", "Conformance", "TabdProtocol"], swiftSettings: strict),
        // Many clients against a real tabd over real sockets (needs the tabd product built).
        .testTarget(name: "StressTests", dependencies: ["TabdLoad", "Conformance", "Coordinator", "Locking", "WebSocketsClient", "TabdProtocol"], path: "Tests/stress",
                    swiftSettings: strict),
    ],
    swiftLanguageModes: [.v6]
)

// Fuzzing (scripts/fuzz, `make fuzz`): the libFuzzer binary, declared only for
// `TABD_FUZZ=1 swift build -c release -Xswiftc -sanitize=fuzzer,address --scratch-path .build-fuzz`;
// ordinary builds never see it.
if Context.environment["TABD_FUZZ"] == "1" {
    package.targets.append(.executableTarget(name: "tabdfuzz", dependencies: ["Auth", "Conformance", "Coordinator", "StateStore", "CSQLite", "CCrypto",
                                                                         "WebSockets", "WebSocketEngine", "TabdServer", "Cluster", "JetStream"],
                                             swiftSettings: strict))
}
