import Foundation
import Testing
@testable import WebSockets

/// The web root's JavaScript modules for pages of other origins (`Configuration.moduleOrigins`,
/// tabd's `--allow-origin`): a module answers an allowed origin with
/// `access-control-allow-origin` naming it, and no other origin; `vary: origin` always.
@Suite struct ModuleCORSTests {
    static let allowed = "http://app.example:5173"

    /// A server of a web root holding a module, a page and a style sheet.
    private func startServer() throws -> (WebSocketServer, URL) {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("tabd-cors-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        try Data("export const x = 1;\n".utf8).write(to: root.appendingPathComponent("tabd.js"))
        try Data("<!doctype html>\n".utf8).write(to: root.appendingPathComponent("index.html"))
        try Data("body {}\n".utf8).write(to: root.appendingPathComponent("style.css"))
        var configuration = Configuration(port: 0, webRoot: root.path, logLevel: .error)
        configuration.moduleOrigins = [Self.allowed]
        configuration.requestTimeoutSeconds = 60
        let server = try WebSocketServer(configuration: configuration, handler: HTTPTestHandler())
        server.start()
        return (server, root)
    }

    private func get(_ server: WebSocketServer, _ method: String, _ path: String, origin: String?) async throws -> RawResponse {
        let connection = try RawHTTPConnection(port: server.port)
        return try await connection.exchange(
            httpRequest(method, path, headers: origin.map { ["origin: \($0)"] } ?? []), head: method == "HEAD")
    }

    @Test func aModuleNamesAnAllowedOriginAndNoOther() async throws {
        let (server, root) = try startServer()
        defer { try? FileManager.default.removeItem(at: root) }
        for method in ["GET", "HEAD"] {
            let allowed = try await get(server, method, "/tabd.js", origin: Self.allowed)
            #expect(allowed.status == 200)
            #expect(allowed.headers["access-control-allow-origin"] == Self.allowed, "\(method)")
            #expect(allowed.headers["vary"] == "origin")
            #expect(allowed.headers["content-type"] == "text/javascript; charset=utf-8")
            for other in ["http://evil.example", "http://app.example:5174", "null", Self.allowed + "/"] {
                let refused = try await get(server, method, "/tabd.js", origin: other)
                #expect(refused.status == 200)
                #expect(refused.headers["access-control-allow-origin"] == nil, "\(method) from \(other)")
                #expect(refused.headers["vary"] == "origin")
            }
            let script = try await get(server, method, "/tabd.js", origin: nil)
            #expect(script.headers["access-control-allow-origin"] == nil && script.headers["vary"] == "origin")
        }
        #expect(try await get(server, "GET", "/tabd.js", origin: Self.allowed).text == "export const x = 1;\n")
        await server.shutdown(timeout: .seconds(1))
    }

    @Test func onlyModulesAreSharedAndAMissingOneGetsNoHeader() async throws {
        let (server, root) = try startServer()
        defer { try? FileManager.default.removeItem(at: root) }
        for path in ["/", "/index.html", "/style.css"] {
            let page = try await get(server, "GET", path, origin: Self.allowed)
            #expect(page.status == 200)
            #expect(page.headers["access-control-allow-origin"] == nil, "\(path)")
        }
        let missing = try await get(server, "GET", "/nope.js", origin: Self.allowed)
        #expect(missing.status == 404 && missing.headers["access-control-allow-origin"] == nil)
        await server.shutdown(timeout: .seconds(1))
    }

    @Test func aPreflightIsAnsweredForAnAllowedOriginOnly() async throws {
        let (server, root) = try startServer()
        defer { try? FileManager.default.removeItem(at: root) }
        let allowed = try await get(server, "OPTIONS", "/tabd.js", origin: Self.allowed)
        #expect(allowed.status == 204)
        #expect(allowed.headers["access-control-allow-origin"] == Self.allowed)
        #expect(allowed.headers["access-control-allow-methods"] == "GET, HEAD")
        #expect(allowed.headers["access-control-max-age"] == "600")
        let refused = try await get(server, "OPTIONS", "/tabd.js", origin: "http://evil.example")
        #expect(refused.status == 403 && refused.headers["access-control-allow-origin"] == nil)
        // Anything but a module keeps answering OPTIONS with 405.
        let page = try await get(server, "OPTIONS", "/index.html", origin: Self.allowed)
        #expect(page.status == 405 && page.headers["allow"] == "GET, HEAD")
        await server.shutdown(timeout: .seconds(1))
    }
}
