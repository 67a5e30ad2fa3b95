import Foundation
import Testing
@testable import WebSockets

/// `Configuration.fileSecurityPolicy` (tabd: `frame-ancestors 'self'`): one
/// `content-security-policy` header on every file, joined to the strict policy's when that is on.
@Suite struct FileSecurityPolicyTests {
    private func root() throws -> URL {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("tabd-csp-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        try Data("<!doctype html>\n".utf8).write(to: root.appendingPathComponent("index.html"))
        try Data("export const x = 1;\n".utf8).write(to: root.appendingPathComponent("a.js"))
        return root
    }

    private func policies(_ response: HTTPResponse) -> [String] {
        response.headers.filter { $0.0 == "content-security-policy" }.map(\.1)
    }

    @Test func everyFileCarriesThePolicyOnce() throws {
        let dir = try root()
        defer { try? FileManager.default.removeItem(at: dir) }
        let files = StaticFiles(root: dir.path, strictSecurityHeaders: false, securityPolicy: "frame-ancestors 'self'")
        for path in ["/", "/index.html", "/a.js"] {
            #expect(policies(files.response(for: path)) == ["frame-ancestors 'self'"], "\(path)")
        }
        let none = StaticFiles(root: dir.path, strictSecurityHeaders: false)
        #expect(policies(none.response(for: "/")).isEmpty)
    }

    @Test func withTheStrictHeadersItJoinsTheirPolicy() throws {
        let dir = try root()
        defer { try? FileManager.default.removeItem(at: dir) }
        let files = StaticFiles(root: dir.path, strictSecurityHeaders: true, securityPolicy: "frame-ancestors 'self'; upgrade-insecure-requests")
        let policy = policies(files.response(for: "/"))
        #expect(policy.count == 1)
        // The strict policy's own frame-ancestors ('none') stays; the new directive is added.
        #expect(policy[0].contains("frame-ancestors 'none'") && !policy[0].contains("frame-ancestors 'self'"))
        #expect(policy[0].hasSuffix(" upgrade-insecure-requests;"))
    }
}
