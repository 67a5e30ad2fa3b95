import Cluster
import Coordinator

/// What a cluster node reads from other nodes through the engine, from any bytes: a room's
/// stream message (its body, one `events` frame per line, and its `Tabd-Forwards` header)
/// delivered to a room's machine, and a forwarded command and a forward's answer as core
/// NATS brings them. Never a trap. A body that reads is re-encoded to the same bytes'
/// batches; a message that folds is delivered and its header's forwarded ids are found at
/// their seqs; one that does not breaks the room (every wait fails) instead. Requests and
/// answers that read write bytes that read back the same.
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
                if !id.isEmpty, let found = machine.storedForward(id) { require(seqs.contains(found), "a forwarded id found outside its message") }
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
