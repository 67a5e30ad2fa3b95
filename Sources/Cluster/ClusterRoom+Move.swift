import Coordinator
import Dispatch
import FoundationEssentials
import Glibc
import JetStream
import Locking

/// Moving a room with a stream of its own (a tabd before shards) into its shard, keeping its
/// life: its epoch, seqs, clients and their nodes (docs/CLUSTER.md, "Moving an existing
/// cluster to shards").
///
/// 1. A **fence** (`Tabd-Kind: moved`) is appended to the room's stream with the stream's
///    compare-and-set, right after the last message this node read: every writer's next
///    message expects an earlier place and fails, so nothing follows the fence. Nodes that
///    have the room loaded see it, close the room's clients with 1001 (they reconnect and
///    resume) and load it again from its shard.
/// 2. The room's state at the fence goes into its shard as the room's first message there
///    (`moved`, a snapshot record of the same life), with the shard's per-subject
///    compare-and-set, and its directory record is written.
/// 3. Its stream is deleted.
/// A node that dies in between leaves the fence: the next node to load the room finds it and
/// finishes the move (the shard's message has a fixed id, so it is stored once).
extension ClusterRoom {
    /// Whether the room's stream ends with its move's fence.
    var movedOut: Bool { withMachine { $0.movedOut } }

    func moveIntoShard() throws(ClusterNode.Failure) {
        guard place.shard == nil else { return }
        if !movedOut { try appendFence() }
        let record = withMachine { $0.snapshotRecord }
        try node.moveIn(room, record: record, life: life)
        // The stream and its snapshot go; its clients elsewhere resume in the shard.
        do {
            _ = try node.client.deleteStream(stream)
            _ = node.client.publish(subject: EngineNames.snapshotSubject(room), data: [])
        } catch {
            node.log("room '\(room)': moved into its shard; its old stream is not deleted yet: \(error)")
        }
        node.log("room '\(room)': moved from its own stream into shard \(node.layout.shard(of: room)), at seq \(record.state.snapshot.seq) of epoch \(life)")
    }

    /// Appends the fence right after the last message read, and waits until this node's
    /// consumer delivers it (or another node's fence): about 15 s at most.
    func appendFence() throws(ClusterNode.Failure) {
        let client = node.client, trust = node.trust
        let msgID = "moved-\(room)-\(life)"
        let deadline = DispatchTime.now().uptimeNanoseconds + 15_000_000_000
        while DispatchTime.now().uptimeNanoseconds < deadline {
            let (after, bound, moved) = withMachine { ($0.delivered, $0.lifeBound, $0.movedOut) }
            if moved { return }
            let seal = trust.sealStream(subject: subject, life: life, bound: trust.sealsLives(roomBound: bound), kind: EngineNames.movedKind,
                                        follows: after, node: node.name, incarnation: node.incarnation, messageID: msgID, forwards: nil,
                                        sealMark: nil, body: [])
            let headers = [(EngineNames.kindHeader, EngineNames.movedKind), (EngineNames.nodeHeader, node.name),
                           (EngineNames.incarnationHeader, node.incarnation), (EngineNames.sealHeader, seal)]
            switch client.publish(subject: subject, data: [], headers: headers, expectedLastSeq: after, msgID: msgID) {
            case .stored, .wrongLastSequence:
                // Stored, or another message is there (another node's fence, or a batch):
                // what the consumer delivers says which.
                _ = waitUntil(deadline: min(deadline, DispatchTime.now().uptimeNanoseconds + 5_000_000_000)) { $0.movedOut || $0.delivered > after }
            case .unknown, .failed:
                Threads.sleep(seconds: 0.1)
            }
        }
        if !movedOut { throw ClusterNode.Failure("room '\(room)': could not fence its stream to move it into its shard", mayPass: true) }
    }
}

extension ClusterNode {
    /// Stores `record` (a room's state at its move's fence) as room `id`'s first message in
    /// its shard, and its directory record. Done already when the shard holds it.
    func moveIn(_ id: RoomID, record: SnapshotRecord, life: String) throws(Failure) {
        let shard = layout.shard(of: id)
        let subject = EngineNames.shardSubject(shard, id)
        let msgID = "moved-\(id)-\(life)"
        let body = record.bytes
        let done = try EngineRetry.standard.run("room '\(id)': moving into shard \(shard)", log: log) { _ throws(Failure) -> EngineRetry.Outcome<Bool> in
            let last: StreamMessage?
            do throws(EngineError) { last = try lastInShard(id) } catch { return .again("cannot read its shard yet (\(error))") }
            var expected: UInt64 = 0
            if let last {
                if last.headers[EngineNames.messageIDHeader] == msgID { return .done(true) } // stored already
                guard isTombstone(last, of: id) else {
                    throw Failure("room '\(id)' cannot move into its shard: the shard holds a room of that id")
                }
                expected = last.streamSeq
            }
            let seal = trust.sealStream(subject: subject, life: life, bound: true, kind: EngineNames.movedKind, follows: expected, node: name,
                                        incarnation: incarnation, messageID: msgID, forwards: nil, sealMark: EngineNames.lifeMarkValue, body: body)
            let headers = [(EngineNames.kindHeader, EngineNames.movedKind), (EngineNames.nodeHeader, name), (EngineNames.incarnationHeader, incarnation),
                           (EngineNames.followsHeader, String(expected)), (EngineNames.sealMarkHeader, EngineNames.lifeMarkValue),
                           (EngineNames.sealHeader, seal)]
            switch client.publish(subject: subject, data: body, headers: headers, expectedLastSeq: expected, perSubject: true, msgID: msgID) {
            case let .stored(seq, _):
                var moved = record
                moved.streamCreated = shardCreated(shard)
                moved.streamSeq = seq
                moved.shard = shard
                moved.lifeStart = seq
                moved.sealed = true
                moved.lifeBound = true
                writeRecord(moved, room: id)
                return .done(true)
            case .wrongLastSequence: return .again(nil) // read again: another node's move
            case let .unknown(why), let .failed(why): return .again("no answer yet (\(why))")
            }
        }
        if done != nil { return }
        throw Failure("cannot move room '\(id)' into its shard: the engine does not answer", mayPass: true)
    }
}
