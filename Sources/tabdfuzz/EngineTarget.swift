import Auth
import Cluster
import Coordinator
import JetStream

/// What a cluster node reads from other nodes through the engine, from any bytes: a room's
/// stream message (its body, one `events` frame per line, and its `Tabd-Forwards` header)
/// delivered to a room's machine, and a forwarded command and a forward's answer as core
/// NATS brings them. Never a trap. A body that reads is re-encoded to the same bytes'
/// batches; a message that folds is delivered and its header's forwarded ids are found at
/// their seqs; one that does not breaks the room (every wait fails) instead. Requests and
/// answers that read write bytes that read back the same. The header, taken as a reply
/// subject reaching a consumer's inbox, is delivered only when it names that consumer at
/// its next position.
/// Input: the header value, 0x00, the body, 0x00, a forwarded command, 0x00, an answer.
enum EngineTarget {
    static func run(_ bytes: [UInt8]) {
        let parts = pieces(bytes, separator: 0, limit: 4)
        func part(_ i: Int) -> [UInt8] { i < parts.count ? parts[i] : [] }
        let header = String(decoding: part(0), as: UTF8.self)
        let body = part(1)

        if let batches = ClusterRoomMachine.batches(in: body) {
            require(ClusterRoomMachine.batches(in: ClusterRoomMachine.body(batches)) == batches, "a group body does not read back")
        }
        var follow = OrderedFollow(stream: "S", consumer: "c1", startSeq: 3)
        if case let .deliver(seq, _) = follow.judge(reply: header, status: nil) {
            let place = OrderedFollow.place(header)
            require(place?.stream == "S" && place?.consumer == "c1" && place?.consumerSeq == 1 && place?.streamSeq == seq && seq > 2,
                    "a reply subject that is not the consumer's next was delivered")
        }
        guard var machine = try? machine() else { return require(false, "no machine at the genesis") }
        _ = machine.append(EventBatch(by: "c1", ref: nil, events: [SequencedEvent(seq: 1, event: .scrolled(tab: "home", offset: 1))]),
                           generation: 0, waiter: 1)
        let delivery = ClusterRoomMachine.Delivery(streamSeq: 2, kind: nil, writer: "n2", incarnation: "i2", messageID: "m",
                                                   forwards: header.isEmpty ? nil : header, data: body)
        let actions = machine.delivered(delivery, now: 1)
        if machine.broken != nil {
            require(actions.contains(.report(1, .unavailable(machine.broken!))), "a broken room left its wait")
        } else if let batches = ClusterRoomMachine.batches(in: body) {
            require(machine.delivered == 2 && machine.lastWriter == "n2", "a message that folds was not taken")
            let seqs = batches[0].firstSeq...batches[batches.count - 1].lastSeq
            for pair in header.split(separator: ",") {
                guard let eq = pair.firstIndex(of: "="), let seq = Int(pair[..<eq]), seqs.contains(seq) else { continue }
                let id = String(pair[pair.index(after: eq)...])
                if !id.isEmpty, case let .applied(found)? = machine.storedOutcome(id) { require(seqs.contains(found), "a forwarded id found outside its message") }
            }
        }

        if let request = try? ForwardRequest(bytes: part(2)) {
            require((try? ForwardRequest(bytes: request.bytes)) == request, "a forwarded command does not read back")
        }
        if let answer = try? ForwardAnswer(bytes: part(3)) {
            require((try? ForwardAnswer(bytes: answer.bytes)) == answer, "a forward's answer does not read back")
            require((answer.frame == nil) != (answer.refused == nil), "an answer with both or neither of frame and refusal")
        }
    }

    static func machine() throws -> ClusterRoomMachine {
        let origin = try Coordinator.origin(tabs: TabInfo.defaults)
        let start = StoredState(epoch: "e1", snapshot: origin, nextPage: TabInfo.defaults.count + 1, nextClient: 1, history: [])
        return ClusterRoomMachine(room: "r", start: start, owners: [:], from: 1, streamEnd: 1, streamCreated: 7, resumeWindow: 100,
                                  messageIDPrefix: "n1-r-x", pipelineDepth: 1)
    }
}

/// The sealed envelope of the nodes' core messages (heartbeats, forwards, answers, deletion
/// notices: `EngineTrust.openCore`) on any bytes. Input: a purpose byte, then a message body.
/// Never a trap. A body is taken as sealed only when it is exactly what the secret's holder
/// makes of what it carries; the same body sealed with another secret is forged; this
/// secret's seal of the bytes opens to them, and with one byte changed (chosen by the input)
/// it does not.
enum EnvelopeTarget {
    static let mine = EngineTrust(secret: SealTarget.first)
    static let theirs = EngineTrust(secret: SealTarget.second)
    static let subject = "tabd.fwd.n1"

    static func run(_ bytes: [UInt8]) {
        guard let head = bytes.first else { return }
        let purposes = ClusterSecret.Purpose.allCases
        let purpose = purposes[Int(head) % purposes.count]
        let data = Array(bytes.dropFirst())
        // Any time is recent enough: only the seal is judged here.
        let (verdict, opened, _) = mine.openCore(purpose, subject: subject, data: data, lifetime: 1e15, now: 0)
        if verdict == .sealed {
            guard let opened, let time = opened.time,
                  mine.sealCore(purpose, subject: subject, args: opened.args, payload: opened.payload, now: time) == data else {
                fatalError("a body was taken as sealed that the secret's holder did not make: \(data)")
            }
        }
        if verdict == .unsigned, data.starts(with: Array("v1.".utf8)) { fatalError("a body that claims a seal was taken as unsealed") }
        let now = 1_700_000_000.0
        let args = ["n2", String(head, radix: 16)]
        let foreign = theirs.sealCore(purpose, subject: subject, args: args, payload: data, now: now)
        if mine.openCore(purpose, subject: subject, data: foreign, lifetime: 5, now: now).0 != .forged {
            fatalError("another secret's seal opened")
        }
        let real = mine.sealCore(purpose, subject: subject, args: args, payload: data, now: now)
        let (ok, back, why) = mine.openCore(purpose, subject: subject, data: real, lifetime: 5, now: now)
        guard ok == .sealed, back?.args == args, back?.payload == data else { fatalError("a real seal did not open: \(why)") }
        if mine.openCore(purpose, subject: "tabd.fwd.n2", data: real, lifetime: 5, now: now).0 == .sealed { fatalError("a moved message opened") }
        if mine.openCore(purpose, subject: subject, data: real, lifetime: 5, now: now + 60).0 == .sealed { fatalError("a stale message opened") }
        var changed = real
        let at = bytes.count % changed.count
        changed[at] ^= max(1, head & 0x7F)
        if mine.openCore(purpose, subject: subject, data: changed, lifetime: 5, now: now).0 == .sealed { fatalError("a changed message opened") }
    }
}
