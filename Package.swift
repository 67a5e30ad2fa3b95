// swift-tools-version: 6.0
import PackageDescription

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "tabd",
    products: [
        .library(name: "Coordinator", targets: ["Coordinator"]),
        .library(name: "WebSockets", targets: ["WebSockets"]),
        .executable(name: "tabd", targets: ["tabd"]),
    ],
    targets: [
        // C at the edge: Debian's libwebsockets, seen only by the WebSockets module.
        .systemLibrary(
            name: "CWebSockets",
            pkgConfig: "libwebsockets",
            providers: [.apt(["libwebsockets-dev"])]
        ),
        // The heart: tab state, lifecycle rules, sequencing, JSON. No networking.
        .target(name: "Coordinator", swiftSettings: strict),
        // libwebsockets wrapped for Swift: server (HTTP + WebSocket) and client.
        .target(name: "WebSockets", dependencies: ["CWebSockets"], swiftSettings: strict),
        // The daemon.
        .executableTarget(name: "tabd", dependencies: ["Coordinator", "WebSockets"], swiftSettings: strict),
        .testTarget(name: "CoordinatorTests", dependencies: ["Coordinator"], swiftSettings: strict),
        .testTarget(name: "WebSocketsTests", dependencies: ["WebSockets"], swiftSettings: strict),
    ],
    swiftLanguageModes: [.v6]
)
