import Auth
import Testing
@testable import Cluster

/// The seals of a room's stream messages: bound to the room's life (its epoch) and place,
/// an absent header told from an empty one, the seal of a build before lives were bound
/// read for what it is.
@Suite struct EngineTrustTests {
    static let secret = try! ClusterSecret(keys: [Array(String(repeating: "k", count: 40).utf8)], source: "test")
    static let trust = EngineTrust(secret: secret)
    static let subject = "tabd.room.r"
    static let body = Array(#"{"type":"events","by":"c1","ref":null,"events":[]}"#.utf8)

    static func headers(seal: String, id: String? = "n1-r-1", kind: String? = nil, mark: String? = nil) -> [String: String] {
        var h = [EngineNames.nodeHeader: "n1", EngineNames.incarnationHeader: "i1", EngineNames.sealHeader: seal]
        h[EngineNames.messageIDHeader] = id
        h[EngineNames.kindHeader] = kind
        h[EngineNames.sealMarkHeader] = mark
        return h
    }

    static func seal(life: String = "e1", follows: UInt64? = 4, id: String? = "n1-r-1", kind: String? = nil, mark: String? = nil,
                     trust: EngineTrust = Self.trust) -> String {
        trust.sealStream(subject: subject, life: life, bound: trust.sealsLives(), kind: kind, follows: follows, node: "n1", incarnation: "i1",
                         messageID: id, forwards: nil, sealMark: mark, body: body)
    }

    static func judge(_ seal: String, life: String = "e1", seq: UInt64 = 5, headers: [String: String]? = nil) -> EngineTrust.Verdict {
        trust.judgeStream(seal: seal, subject: subject, life: life, seq: seq, headers: headers ?? Self.headers(seal: seal), body: body)
    }

    @Test func aSealOpensOnlyInItsRoomsLifeAndAtItsPlace() {
        let seal = Self.seal()
        #expect(seal.hasPrefix("v2."))
        #expect(Self.judge(seal) == .sealed)
        #expect(Self.judge(seal, life: "e2") == .forged, "a message of an earlier life of the room")
        #expect(Self.judge(seal, seq: 6) == .forged, "moved to another place")
        #expect(Self.trust.judgeStream(seal: seal, subject: "tabd.room.other", life: "e1", seq: 5, headers: Self.headers(seal: seal), body: Self.body) == .forged)
        #expect(Self.judge(seal, seq: 0) == .forged, "no message is at stream position 0")
    }

    @Test func anAbsentHeaderAndAnEmptyOneSealDifferently() {
        let absent = Self.seal(id: nil)
        #expect(Self.judge(absent, headers: Self.headers(seal: absent, id: nil)) == .sealed)
        #expect(Self.judge(absent, headers: Self.headers(seal: absent, id: "")) == .forged)
        let empty = Self.seal(id: "")
        #expect(Self.judge(empty, headers: Self.headers(seal: empty, id: nil)) == .forged)
        #expect(Self.judge(empty, headers: Self.headers(seal: empty, id: "")) == .sealed)
    }

    @Test func aLifeMarkHoldsAtAnyPlaceOfItsLifeOnly() {
        let mark = Self.seal(follows: nil, kind: EngineNames.sealMarkKind, mark: EngineNames.lifeMarkValue)
        let headers = Self.headers(seal: mark, kind: EngineNames.sealMarkKind, mark: EngineNames.lifeMarkValue)
        #expect(Self.judge(mark, seq: 3, headers: headers) == .sealed)
        #expect(Self.judge(mark, seq: 900, headers: headers) == .sealed)
        #expect(Self.judge(mark, life: "e0", seq: 3, headers: headers) == .forged)
        // A batch's seal never holds at any place.
        let batch = Self.seal(follows: nil)
        #expect(Self.judge(batch) == .forged)
    }

    @Test func theSealOfABuildBeforeLivesWereBoundIsReadAsUnbound() {
        // Phase one of a move (`--cluster-unsigned accept`) seals as that build did, until
        // the room has its life mark.
        let phaseOne = EngineTrust(secret: Self.secret, acceptUnsigned: true)
        #expect(!phaseOne.sealsLives() && phaseOne.sealsLives(roomBound: true) && Self.trust.sealsLives())
        let old = Self.seal(trust: phaseOne)
        #expect(old.hasPrefix("v1."))
        #expect(Self.judge(old) == .sealedUnbound)
        #expect(Self.judge(old, life: "e2") == .sealedUnbound, "it binds no life: believed only before the room's life mark")
        #expect(Self.judge(old, seq: 6) == .forged, "it binds its place all the same")
        // A v1 seal relabelled v2 opens as neither.
        #expect(Self.judge("v2" + old.dropFirst(2)) == .forged)
        #expect(Self.judge("v3" + old.dropFirst(2)) == .forged)
    }
}
