import Foundation
import Testing
@testable import WebSockets

/// The web root served as a CDN would: a strong validator from the content, 304 on a
/// match, gzip for text when the client takes it, a year's lifetime only for a URL that
/// names the content's hash, and a changed file seen at once.
@Suite struct StaticFileCachingTests {
    private func root() throws -> URL {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("tabd-cache-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        let module = (0..<200).map { "export const value\($0) = \($0);\n" }.joined()
        try Data(module.utf8).write(to: root.appendingPathComponent("a.js"))
        try Data((0..<2000).map { UInt8(truncatingIfNeeded: $0 &* 7919) }).write(to: root.appendingPathComponent("b.png"))
        try Data("tiny\n".utf8).write(to: root.appendingPathComponent("t.css"))
        return root
    }

    private func header(_ response: HTTPResponse, _ name: String) -> String? {
        response.headers.first { $0.0 == name }?.1
    }

    @Test func theValidatorComesFromTheContentAndAMatchIsAnsweredWithoutABody() throws {
        let dir = try root()
        defer { try? FileManager.default.removeItem(at: dir) }
        let files = StaticFiles(root: dir.path, strictSecurityHeaders: false)
        let first = files.response(for: "/a.js", .init())
        let etag = try #require(header(first, "etag"))
        #expect(etag.hasPrefix("\"") && etag.hasSuffix("\"") && etag.count == 18, "a strong validator: \(etag)")
        #expect(header(first, "cache-control") == "no-cache")
        #expect(header(files.response(for: "/a.js", .init()), "etag") == etag, "the same content, the same validator")
        for ifNoneMatch in [etag, "W/\(etag)", "\"other\", \(etag)", "*"] {
            let again = files.response(for: "/a.js", .init(ifNoneMatch: ifNoneMatch))
            #expect(again.status == 304 && again.body.isEmpty, "\(ifNoneMatch)")
            #expect(header(again, "etag") == etag && header(again, "cache-control") == "no-cache")
        }
        #expect(files.response(for: "/a.js", .init(ifNoneMatch: "\"0000000000000000\"")).status == 200)
        // The file changes: a new validator, and the old one no longer matches.
        try Data("export const changed = true;\n".utf8).write(to: dir.appendingPathComponent("a.js"))
        let changed = files.response(for: "/a.js", .init(ifNoneMatch: etag))
        #expect(changed.status == 200 && String(decoding: changed.body, as: UTF8.self).contains("changed"))
        #expect(header(changed, "etag") != etag)
    }

    @Test func textIsGzippedForAClientThatTakesItAndNothingElseIs() throws {
        let dir = try root()
        defer { try? FileManager.default.removeItem(at: dir) }
        let files = StaticFiles(root: dir.path, strictSecurityHeaders: false)
        let plain = files.response(for: "/a.js", .init())
        let zipped = files.response(for: "/a.js", .init(acceptsGzip: true))
        #expect(header(plain, "content-encoding") == nil)
        #expect(header(zipped, "content-encoding") == "gzip")
        #expect(zipped.body.count < plain.body.count / 2 && zipped.body.starts(with: [0x1F, 0x8B]))
        #expect(header(zipped, "etag") != header(plain, "etag"), "one validator per representation")
        #expect(header(zipped, "vary") == "origin, accept-encoding" && header(plain, "vary") == "origin, accept-encoding")
        // Either validator revalidates (a cache may hold either representation).
        #expect(files.response(for: "/a.js", .init(ifNoneMatch: header(zipped, "etag"))).status == 304)
        // Gunzipped, the bytes are the file's.
        let unzipped = try gunzip(zipped.body)
        #expect(unzipped == plain.body)
        // Not an image (compressed already), not a tiny file.
        #expect(header(files.response(for: "/b.png", .init(acceptsGzip: true)), "content-encoding") == nil)
        #expect(header(files.response(for: "/t.css", .init(acceptsGzip: true)), "content-encoding") == nil)
    }

    @Test func acceptEncodingIsReadAsRFC9110SaysForGzip() {
        #expect(StaticFiles.Conditions.acceptsGzip(["gzip", "deflate", "br"]))
        #expect(StaticFiles.Conditions.acceptsGzip(["gzip;q=0.5"]))
        #expect(StaticFiles.Conditions.acceptsGzip(["*"]))
        #expect(!StaticFiles.Conditions.acceptsGzip(["gzip;q=0"]))
        #expect(!StaticFiles.Conditions.acceptsGzip(["br", "identity"]))
        #expect(!StaticFiles.Conditions.acceptsGzip([]))
    }

    @Test func onlyAURLNamingTheContentsHashIsKeptForAYear() throws {
        let dir = try root()
        defer { try? FileManager.default.removeItem(at: dir) }
        let files = StaticFiles(root: dir.path, strictSecurityHeaders: false)
        let etag = try #require(header(files.response(for: "/a.js", .init()), "etag"))
        let hash = String(etag.dropFirst().dropLast())
        #expect(header(files.response(for: "/a.js", .init(version: hash)), "cache-control") == "public, max-age=31536000, immutable")
        #expect(header(files.response(for: "/a.js", .init(version: "0123456789abcdef")), "cache-control") == "no-cache")
        try Data("export const changed = true;\n".utf8).write(to: dir.appendingPathComponent("a.js"))
        #expect(header(files.response(for: "/a.js", .init(version: hash)), "cache-control") == "no-cache", "an old hash is not the file's")
    }

    /// `gzip -dc` of `bytes`.
    private func gunzip(_ bytes: [UInt8]) throws -> [UInt8] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/gzip")
        process.arguments = ["-dc"]
        let input = Pipe(), output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        input.fileHandleForWriting.write(Data(bytes))
        try input.fileHandleForWriting.close()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Array(data)
    }
}
