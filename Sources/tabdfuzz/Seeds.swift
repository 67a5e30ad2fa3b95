import Auth
import Conformance
import Coordinator
import Foundation
import StateStore
import Synchronization

/// Writes the seed corpus of every target under `dir/<target>/` (scripts/fuzz --make-seeds):
/// real frames, tabs files, snapshots and batches of a real coordinator, tokens signed with
/// the test key, state files written by StateStore itself.
enum Seeds {
    static func make(into dir: String) {
        func write(_ target: String, _ name: String, _ bytes: [UInt8]) {
            let folder = (dir as NSString).appendingPathComponent(target)
            try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            _ = FileManager.default.createFile(atPath: (folder as NSString).appendingPathComponent(name), contents: Data(bytes))
        }
        func text(_ s: String) -> [UInt8] { Array(s.utf8) }

        // Commands: two of every kind, as a client writes them (from the kinds' declarations),
        // and refused ones: each field of each kind wrong in turn, and frames no kind reads.
        var rng = SeededRandom(seed: 1)
        let envelopes = CommandKind.allCases.flatMap { kind in
            (0..<2).map { i in CommandEnvelope(ref: i == 0 ? nil : "\(kind.rawValue)-\(i)", command: randomCommand(kind, &rng)) }
        }
        let frames = envelopes.map { $0.json.compactString }
        for (i, f) in frames.enumerated() { write("command", "frame-\(i)", text(f)) }
        write("command", "session", text(frames.joined(separator: "\n")))
        write("command", "refused", text((envelopes.flatMap { wrongFields($0.json) }.map(\.compactString) + [
            ##"{"type":"set","key":"k","value":{"a":1,"a":2}}"##, ##"{"type":"warp"}"##, ##"[1,2]"##,
            ##"{"type":"ping","ref":"0123456789012345678901234567890123456789012345678901234567890123456789"}"##,
        ]).joined(separator: "\n")))

        // JSON: frames, values, edge cases.
        for (i, f) in frames.prefix(6).enumerated() { write("json", "frame-\(i)", text(f)) }
        for (i, s) in [
            ##"{"a":[1,-0.5e+10,2E-3,true,false,null],"b":{"c":"\u00e9\ud83d\ude00\n\t\"\\\/"},"a":0}"##,
            "  [ [], {}, \"\", 0, -0, 1.0 ]  ", ##""\u0000\u001f""##, "123456789012345678901234567890", ##"{"k":"é😀"}"##,
            String(repeating: "[", count: 130) + String(repeating: "]", count: 130), ##"{"x":1,}"##, ##"[01]"##, ##""\ud800""##,
        ].enumerated() { write("json", "value-\(i)", text(s)) }

        // Tabs files.
        write("tabs", "array", text(##"[{"id":"home","title":"Home","icon":"house","color":"#ff3b30"},{"id":"inbox","title":"Inbox","icon":"tray.full","color":"#007AFF","badge":"12"}]"##))
        write("tabs", "object", text(##"{"tabs":[{"id":"a-1","title":"Ä","icon":"star.fill","color":"#34C759","badge":null}]}"##))
        write("tabs", "duplicate", text(##"[{"id":"x","title":"X","icon":"x","color":"#000000"},{"id":"x","title":"Y","icon":"y","color":"#FFFFFF"}]"##))
        write("tabs", "bad", text(##"{"tabs":[{"id":"x","title":"","icon":"X","color":"#12345"}]}"##))

        // Snapshots and batches of a real coordinator.
        let (snapshot, batches, stored) = session()
        let snapLine = snapshot.json(capped: false).compactString
        write("snapshot", "snapshot", text(snapLine))
        write("snapshot", "origin", text(stored.json(capped: false).compactString))
        write("snapshot", "with-batches", text(([stored.json(capped: false).compactString] + batches.map { ServerFrame.events($0).bytes }.map { String(decoding: $0, as: UTF8.self) }).joined(separator: "\n")))
        write("snapshot", "counters", text(##"{"seq":3,"selected":"a","scrollToTop":0,"tabs":[{"id":"a","title":"A","icon":"a","color":"#000000","badge":null,"stack":[{"id":"p1","route":"root","appeared":true,"appearCount":1}],"scroll":0,"values":{}}],"clientCount":0,"clients":[],"next_page":2,"next_client":1}"##))

        // A room that crosses --presence-limit, counts and empties; one counted by node.
        write("snapshot", "counted", text([##"{"seq":3,"selected":"a","scrollToTop":0,"tabs":[{"id":"a","title":"A","icon":"a","color":"#000000","badge":null,"stack":[{"id":"p1","route":"root","appeared":true,"appearCount":1}],"scroll":0,"values":{}}],"presence":"listed","clientCount":1,"clients":[{"id":"c1","name":"Ann"}],"next_page":2,"next_client":2}"##, ##"{"type":"events","by":"tabd","ref":null,"events":[{"seq":4,"kind":"clientJoined","client":{"id":"c2","name":"Bo"}},{"seq":5,"kind":"clientIdsReserved","from":3,"count":1000},{"seq":6,"kind":"presenceCounted","count":40}]}"##, ##"{"type":"events","by":"tabd","ref":null,"events":[{"seq":7,"kind":"clientCount","count":39}]}"##, ##"{"type":"events","by":"tabd","ref":null,"events":[{"seq":8,"kind":"presenceListed","clients":[]}]}"##].joined(separator: "\n")))
        write("snapshot", "counted-by-node", text([##"{"seq":3,"selected":"a","scrollToTop":0,"tabs":[{"id":"a","title":"A","icon":"a","color":"#000000","badge":null,"stack":[{"id":"p1","route":"root","appeared":true,"appearCount":1}],"scroll":0,"values":{}}],"presence":"counted","clientCount":7,"clients":[],"nodes":{"n1":3,"n2":4},"next_page":2,"next_client":900}"##, ##"{"type":"events","by":"tabd","ref":null,"events":[{"seq":4,"kind":"clientCount","node":"n2","count":0},{"seq":5,"kind":"clientIdsReserved","node":"n1","from":900,"count":1000}]}"##].joined(separator: "\n")))

        // State files written by StateStore, and the built form of the same content.
        for (name, rooms) in [("one-room", ["main"]), ("two-rooms", ["main", "Room_2"])] {
            write("statefile", "\(name).db", stateFile(rooms: rooms, in: dir))
        }
        write("statefile", "built", text(([snapLine] + batches.suffix(3).map { String(decoding: ServerFrame.events($0).bytes, as: UTF8.self) }).joined(separator: "\n")))

        // Tokens signed with the test key: mode byte '0' + token, or '1' + header 0x00 claims.
        let exp = fuzzNow + 3600
        let grants: [(String, Grant)] = [
            ("view-room", Grant(role: .view, scope: .room("main"), expires: exp)),
            ("control-named", Grant(role: .control, scope: .room("Room_2"), name: "Ann", expires: exp)),
            ("admin-every", Grant(role: .admin, scope: .every, expires: exp)),
            ("no-room", Grant(role: .control, scope: nil, expires: exp)),
            ("expired", Grant(role: .admin, scope: .every, expires: fuzzNow - 1)),
        ]
        for (name, grant) in grants { write("jwt", name, text("0" + testToken.sign(grant, issuedAt: Int(fuzzNow) - 10))) }
        let valid = testToken.sign(grants[0].1, issuedAt: Int(fuzzNow))
        write("jwt", "bad-signature", text("0" + valid.dropLast(2) + "AA"))
        write("jwt", "alg-none", text("0" + String(decoding: base64url(text(##"{"alg":"none"}"##)), as: UTF8.self) + "." + valid.split(separator: ".")[1] + "."))
        write("jwt", "garbage", text("0a.b.c"))
        for (name, header, claims) in [
            ("claims-nbf", ##"{"alg":"HS256","typ":"JWT"}"##, ##"{"room":"main","role":"view","exp":1700003600,"nbf":1699999999,"name":null}"##),
            ("claims-future", ##"{"alg":"HS256"}"##, ##"{"room":"*","role":"admin","exp":1.7e9,"nbf":1700000001}"##),
            ("claims-bad", ##"{"alg":"HS256","crit":["x"]}"##, ##"{"role":"root","exp":"soon","room":"bad room"}"##),
            ("claims-alg", ##"{"alg":"HS512"}"##, ##"{"role":"view","exp":1800000000}"##),
        ] { write("jwt", name, text("1" + header) + [0] + text(claims)) }

        // Envelopes: a purpose byte, then a core message's body (sealed, forged, unsealed).
        let envelope = EnvelopeTarget.mine.sealCore(.forward, subject: EnvelopeTarget.subject, args: ["n2", "i2"],
                                                    payload: text(#"{"id":"f1","room":"main"}"#), now: 1_700_000_000)
        write("envelope", "sealed", [1] + envelope)
        write("envelope", "other-purpose", [2] + envelope)
        write("envelope", "unsealed", [3] + text("0123456789abcdef"))
        write("envelope", "malformed", [0] + text("v1.x.y notatime\n"))
        // Seals: a purpose byte, the seal, 0x00, fields split by 0x01, 0x00, the body.
        let sealFields = ["tabd.room.main", "main", "batch", "41"]
        let sealBody = text(#"{"type":"events"}"#)
        let sealed = SealTarget.first.seal(.batch, fields: sealFields, body: sealBody)
        let joined = Array(sealFields.map { text($0) }.joined(separator: [1]))
        write("seal", "real", [0] + text(sealed) + [0] + joined + [0] + sealBody)
        write("seal", "moved", [0] + text(sealed) + [0] + joined + [1] + [0] + sealBody)
        write("seal", "other-purpose", [1] + text(sealed) + [0] + joined + [0] + sealBody)
        write("seal", "garbage", [3] + text("v1.zz.00") + [0, 0])

        // Queries: Authorization header, 0x00, query string.
        let token = testToken.sign(grants[1].1, issuedAt: Int(fuzzNow))
        write("query", "token-param", [0] + text("room=Room_2&token=\(token)&name=Ann&resume=12&epoch=00000000000000ff"))
        write("query", "bearer", text("Bearer  \(token) ") + [0] + text("room=Room_2"))
        write("query", "operator", text("bearer fuzz-operator-token") + [0] + text("limit=100&after=main"))
        write("query", "encoded", [0] + text("room=ma%69n&token=fuzz%2Doperator%2Dtoken&x&=y&name=A+B"))
        write("query", "bad-room", [0] + text("room=no%20spaces&limit=0"))

        // API requests: a method byte (index into APITarget.methods; 0x80: body too large),
        // the target, optionally 0x00 and an Authorization header, optionally 0x00 and a
        // Last-Event-ID.
        write("api", "list", [0] + text("/api/rooms?after=main&limit=10"))
        write("api", "list-admin", [0] + text("/api/rooms/") + [0] + text("Bearer fuzz-operator-token"))
        write("api", "create", [3] + text("/api/rooms/kiosk") + [0] + text("Bearer \(token)"))
        write("api", "command", [2] + text("/api/rooms/Room_2/commands") + [0] + text("Bearer \(token)"))
        write("api", "delete-big", [0x84] + text("/api/rooms/a/../b?token=x"))
        write("api", "bad", [5] + text("/api/rooms/no%20spaces/commands/extra?limit=0"))
        write("api", "follow", [0] + text("/api/rooms/kiosk/events?after=12&epoch=0123456789abcdef") + [0] + text("Bearer \(token)") + [0] + text("40"))
        write("api", "follow-outbox", [0] + text("/api/events?after=x") + [0] + text("Bearer fuzz-operator-token") + [0] + text("99999999999999999999"))

        // Room ids.
        for (i, s) in ["main", "Room_2", "a-b_C-9", String(repeating: "x", count: 64), String(repeating: "y", count: 65), "*", "", "é", "a b", "..", "main\0"].enumerated() {
            write("roomid", "id-\(i)", text(s))
        }
    }

    /// A coordinator's session: its origin, every batch, and the snapshot at the end.
    static func session() -> (Snapshot, [EventBatch], Snapshot) {
        let result = Mutex<(Snapshot, [EventBatch], Snapshot)?>(nil)
        blocking {
            let c = try! Coordinator()
            let origin = await c.snapshot()
            let seen = Mutex<[EventBatch]>([])
            await c.addObserver { batch in seen.withLock { $0.append(batch) } }
            let me = try! await c.connect(.init(name: "Ann")).client.id
            for command in sessionCommands { _ = try? await c.execute(command, by: me) }
            let last = await c.snapshot()
            let all = seen.withLock { $0 }
            result.withLock { $0 = (last, all, origin) }
        }
        return result.withLock { $0! }
    }

    /// A session of random commands of every kind, over the default tabs and a few that come and go.
    static let sessionCommands: [Command] = {
        var rng = SeededRandom(seed: 2)
        return (0..<40).map { _ in randomCommand(&rng, tabs: TabInfo.defaults.map(\.id) + ["inbox", "t1"]) }
    }()

    /// The frame with each of its fields wrong in turn: of another type, too long or too big, or gone.
    static func wrongFields(_ frame: JSONValue) -> [JSONValue] {
        guard case let .object(members) = frame else { return [] }
        var wrong: [JSONValue] = []
        for (i, (name, value)) in members.enumerated() where name != "type" {
            let replacements: [JSONValue?] = switch value {
            case .string: [.int(7), .string("BAD ID " + String(repeating: "x", count: 80)), nil]
            case .number: [.string("1"), .double(1e300), .double(-1e20), nil]
            case .object: [.string("x"), .array([]), nil] + wrongFields(value).map(Optional.some)
            default: [.object([]), nil]
            }
            for r in replacements {
                var m = members
                if let r { m[i].1 = r } else { m.remove(at: i) }
                wrong.append(.object(m))
            }
        }
        return wrong
    }

    /// A state file written by StateStore for rooms with the session above.
    static func stateFile(rooms: [String], in dir: String) -> [UInt8] {
        let path = (scratchDirectory as NSString).appendingPathComponent("seed-\(rooms.count).db")
        for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) }
        blocking {
            let store = try! StateStore(options: .init(path: path, resumeWindow: 100, snapshotEvery: 8))
            for id in rooms {
                let room = try! await store.createRoom(id, tabs: TabInfo.defaults)
                let c = Coordinator(restoring: room.loaded, durability: room)
                try! await c.start()
                let me = try! await c.connect(.init(name: "Ann")).client.id
                for command in sessionCommands { _ = try? await c.execute(command, by: me) }
                await room.unload()
            }
            store.close()
        }
        return Array(FileManager.default.contents(atPath: path)!)
    }
}
