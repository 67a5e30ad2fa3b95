@testable import Auth
import Foundation
import Testing

private let old = Array("an old cluster key of 32 bytes!!".utf8)
private let new = Array("the new cluster key, also 32 b..".utf8)
private let fields = ["tabd.room.main", "main", "batch", "41"]
private let body = Array(#"{"type":"events"}"#.utf8)

/// The seals of the cluster's messages: what opens them and what does not.
struct ClusterSecretTests {
    @Test func aSealOpensForTheSamePurposeFieldsAndBodyOnly() throws {
        let secret = try ClusterSecret(keys: [old], source: "test")
        let seal = secret.seal(.batch, fields: fields, body: body)
        #expect(secret.opens(seal, .batch, fields: fields, body: body))
        // Another purpose, a moved message, another position, another body: closed.
        #expect(!secret.opens(seal, .forward, fields: fields, body: body))
        #expect(!secret.opens(seal, .batch, fields: ["tabd.room.other", "other", "batch", "41"], body: body))
        #expect(!secret.opens(seal, .batch, fields: ["tabd.room.main", "main", "batch", "42"], body: body))
        #expect(!secret.opens(seal, .batch, fields: fields, body: body + [0x20]))
        #expect(!secret.opens(seal, .batch, fields: fields + [""], body: body))
    }

    @Test func fieldBoundariesAreSealedTooSoNoTwoListsReadAlike() throws {
        let secret = try ClusterSecret(keys: [old], source: "test")
        let seal = secret.seal(.answer, fields: ["ab", "c"], body: [])
        #expect(!secret.opens(seal, .answer, fields: ["a", "bc"], body: []))
        #expect(!secret.opens(seal, .answer, fields: ["abc"], body: []))
        #expect(!secret.opens(secret.seal(.answer, fields: ["x"], body: Array("y".utf8)), .answer, fields: ["xy"], body: []))
    }

    @Test func theFirstKeySealsAndEveryKeyOpensDuringARotation() throws {
        let before = try ClusterSecret(keys: [old], source: "test")
        let during = try ClusterSecret(keys: [new, old], source: "test")
        let after = try ClusterSecret(keys: [new], source: "test")
        let sealedBefore = before.seal(.heartbeat, fields: ["n1"], body: [1])
        let sealedDuring = during.seal(.heartbeat, fields: ["n1"], body: [1])
        #expect(during.opens(sealedBefore, .heartbeat, fields: ["n1"], body: [1]))
        #expect(during.keyID(of: sealedDuring) == after.sealingKeyID)
        #expect(after.opens(sealedDuring, .heartbeat, fields: ["n1"], body: [1]))
        #expect(!after.opens(sealedBefore, .heartbeat, fields: ["n1"], body: [1]), "a dropped key opens nothing")
        #expect(!before.opens(sealedDuring, .heartbeat, fields: ["n1"], body: [1]))
    }

    @Test func malformedOrForgedSealsOpenNothing() throws {
        let secret = try ClusterSecret(keys: [old], source: "test")
        let seal = secret.seal(.deletion, fields: ["main"], body: [])
        let parts = seal.split(separator: ".").map(String.init)
        var flipped = Array(parts[2].utf8)
        flipped[0] = flipped[0] == UInt8(ascii: "0") ? UInt8(ascii: "1") : UInt8(ascii: "0")
        for forged in ["", "v1", "v1..", "v2.\(parts[1]).\(parts[2])", "v1.\(parts[1]).\(String(decoding: flipped, as: UTF8.self))",
                       "v1.\(parts[1]).\(parts[2].prefix(62))", "v1.\(parts[1]).\(parts[2].uppercased())",
                       "v1.0000000000000000.\(parts[2])", "\(seal).x"] {
            #expect(!secret.opens(forged, .deletion, fields: ["main"], body: []), "opened \(forged)")
        }
        // A seal made with another secret, under the same key id text, does not open either.
        let other = try ClusterSecret(keys: [new], source: "test")
        let foreign = other.seal(.deletion, fields: ["main"], body: [])
        #expect(!secret.opens(foreign, .deletion, fields: ["main"], body: []))
    }

    @Test func shortEmptyOrRepeatedKeysAreRefused() {
        #expect(throws: ClusterSecret.Error.self) { try ClusterSecret(keys: [], source: "test") }
        #expect(throws: ClusterSecret.Error.self) { try ClusterSecret(keys: [Array("short".utf8)], source: "test") }
        #expect(throws: ClusterSecret.Error.self) { try ClusterSecret(keys: [old, old], source: "test") }
    }

    @Test func theFileHoldsOneKeyPerLineFirstSealing() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("cluster-secret-\(UInt64.random(in: 0...UInt64.max))").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try "# rotated 2026-12-04\n\(String(decoding: new, as: UTF8.self))\n\n  \(String(decoding: old, as: UTF8.self))  \r\n"
            .write(toFile: path, atomically: true, encoding: .utf8)
        let loaded = try ClusterSecret.load(path: path)
        #expect(loaded.keys.count == 2)
        #expect(loaded.sealingKeyID == (try ClusterSecret(keys: [new], source: "test")).sealingKeyID)
        let sealedByOld = try ClusterSecret(keys: [old], source: "test").seal(.forward, fields: ["n2"], body: [7])
        #expect(loaded.opens(sealedByOld, .forward, fields: ["n2"], body: [7]))
        #expect(throws: ClusterSecret.Error.self) { try ClusterSecret.load(path: path + ".missing") }
    }
}
