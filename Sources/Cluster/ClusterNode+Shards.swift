import Coordinator
import Dispatch
import FoundationEssentials
import Glibc
import JetStream
import Locking

/// A cluster's rooms in shards: the layout, the shard streams, and creating, listing and
/// deleting rooms as subjects of them (docs/CLUSTER.md, "How rooms are laid out").
extension ClusterNode {
    /// Most messages a room keeps in its shard (its history before the latest snapshot
    /// goes first), as a room's own stream did.
    static let maxMessagesPerRoom: Int64 = 100_000

    /// The layout the engine records, or (the cluster's first node) a new one of `shards`
    /// recorded now. The first record whose seal opens is the layout: of nodes starting at
    /// once, the compare-and-set on the subject lets one write it.
    static func establishLayout(client: EngineClient, trust: EngineTrust, replicas: Int, shards: Int,
                                log: @Sendable (String) -> Void) throws(Failure) -> ShardLayout {
        let subject = EngineNames.layoutSubject
        var lastError = ""
        let found = try EngineRetry.start.run("the engine is not ready for the shard layout", log: log) { _ -> EngineRetry.Outcome<ShardLayout> in
            do throws(EngineError) {
                _ = try client.ensureStream(name: EngineNames.clusterStream, subjects: ["tabd.cluster.>"], replicas: replicas, allowDirect: true)
                _ = try client.ensureStream(name: EngineNames.directory, subjects: ["tabd.dir.*"], replicas: replicas, maxPerSubject: 1)
                let last = try client.lastMessage(stream: EngineNames.clusterStream, subject: subject, headerKeys: [EngineNames.sealHeader])
                var next: UInt64 = 1
                var forged = 0
                while let end = last?.streamSeq, next <= end,
                      let message = try client.nextMessage(stream: EngineNames.clusterStream, subject: subject, from: next, headerKeys: [EngineNames.sealHeader]) {
                    next = message.streamSeq + 1
                    guard trust.judgeLayout(seal: message.headers[EngineNames.sealHeader], subject: subject, body: message.data) == .sealed,
                          let layout = try? ShardLayout(bytes: message.data) else {
                        forged += 1
                        continue
                    }
                    if forged > 0 { log("the engine holds \(forged) shard layout record\(forged == 1 ? "" : "s") not sealed by a node: passed over") }
                    // Sealed with a key being rotated out: sealed again with this node's, so
                    // that the layout outlives that key.
                    if trust.isOtherKey(message.headers[EngineNames.sealHeader]) {
                        _ = client.publish(subject: subject, data: message.data,
                                           headers: [(EngineNames.sealHeader, trust.sealLayout(subject: subject, body: message.data))])
                    }
                    return .done(layout)
                }
                if let end = last?.streamSeq, next <= end { return .again(nil) } // a replica behind: read again
                let layout = ShardLayout.random(shards: shards)
                let body = layout.bytes
                switch client.publish(subject: subject, data: body, headers: [(EngineNames.sealHeader, trust.sealLayout(subject: subject, body: body))],
                                      expectedLastSeq: last?.streamSeq ?? 0, perSubject: true) {
                case .stored:
                    log("laid the cluster's rooms out in \(shards) shards")
                    return .done(layout)
                case .wrongLastSequence: return .again(nil) // another node was first: read its layout
                case let .unknown(why), let .failed(why):
                    lastError = why
                    return .again(why)
                }
            } catch {
                lastError = "\(error)"
                return .again("\(error)")
            }
        }
        guard let found else { throw Failure("cannot read or record the cluster's shard layout: \(lastError)") }
        return found
    }

    /// `body`, tried again every quarter second while it throws, for at most `seconds`; then
    /// its last error. Each failure but the last is logged once.
    static func retrying<T>(for seconds: Double, log: @Sendable (String) -> Void, what: String, _ body: () throws -> T) throws -> T {
        let deadline = Date(timeIntervalSinceNow: seconds)
        var logged = false
        while true {
            do { return try body() } catch {
                guard Date() < deadline else { throw error }
                if !logged { log("\(what): \(error); trying again for up to \(Int(seconds)) s") }
                logged = true
                Threads.sleep(seconds: 0.25)
            }
        }
    }

    /// Makes sure every shard stream exists (several at once: each is a replicated group
    /// the engine elects a leader for) and returns their creation times.
    static func ensureShards(client: EngineClient, layout: ShardLayout, replicas: Int, log: @escaping @Sendable (String) -> Void) throws(Failure) -> [Int64] {
        let created = Locked([Int64?](repeating: nil, count: layout.shards))
        let failures = Locked([String]())
        DispatchQueue.concurrentPerform(iterations: layout.shards) { shard in
            let name = EngineNames.shardStream(shard)
            var lastError = ""
            let info = try? EngineRetry.start.run("shard stream \(name) is not ready", log: log) { _ -> EngineRetry.Outcome<StreamInfo> in
                do throws(EngineError) {
                    return .done(try client.ensureStream(name: name, subjects: [EngineNames.shardFilter(shard)], replicas: replicas,
                                                         maxPerSubject: maxMessagesPerRoom, duplicateWindowSeconds: 120, allowDirect: true))
                } catch {
                    lastError = "\(error)"
                    return .again(lastError)
                }
            }
            if let info = info ?? nil { created.withLock { $0[shard] = info.created } } else { failures.withLock { $0.append("\(name): \(lastError)") } }
        }
        if let failure = failures.withLock({ $0.first }) { throw Failure("cannot make the shard streams: \(failure)") }
        return created.withLock { $0.map { $0 ?? 0 } }
    }

    /// The follower of `shard` on this node.
    func follower(of shard: Int) -> ShardFollower { followers[shard] }

    /// The creation time of `shard`'s stream.
    func shardCreated(_ shard: Int) -> Int64 { shardCreation[shard] }

    // MARK: Rooms in shards

    /// The last message of room `id` in its shard, from the shard's leader.
    func lastInShard(_ id: RoomID) throws(EngineError) -> StreamMessage? {
        let shard = layout.shard(of: id)
        return try client.lastMessage(stream: EngineNames.shardStream(shard), subject: EngineNames.shardSubject(shard, id), headerKeys: ClusterRoom.headerKeys)
    }

    /// Whether `last`, a room's last message in its shard, is the tombstone that ended a
    /// life of the room: sealed for that life (which its body names), right after the
    /// room's message it says it follows. A copy of an older tombstone put there again, or
    /// a forged one, is not.
    func isTombstone(_ last: StreamMessage, of id: RoomID) -> Bool {
        guard last.headers[EngineNames.kindHeader] == EngineNames.tombstoneKind, let ended = try? Genesis.life(in: last.data) else { return false }
        let shard = layout.shard(of: id), subject = EngineNames.shardSubject(shard, id)
        let (verdict, follows) = trust.judgeShard(seal: last.headers[EngineNames.sealHeader], subject: subject, life: ended,
                                                  headers: last.headers, body: last.data)
        guard verdict == .sealed, let follows else { return false }
        return isAtPlace(last, follows: follows, of: id)
    }

    /// Whether `message`, one of room `id`'s in its shard, stands right after the room's
    /// message at `follows` (nothing of the room between them), as its seal says it does: a
    /// copy of a genuine message put there again does not. A replica that has not got
    /// `message` yet finds nothing there (it holds a prefix of the shard, and nothing came
    /// between): asked again, for a few seconds (a replica just restarted answers none
    /// for about two).
    func isAtPlace(_ message: StreamMessage, follows: UInt64, of id: RoomID) -> Bool {
        let shard = layout.shard(of: id), subject = EngineNames.shardSubject(shard, id)
        let next = try? EngineRetry.replica.run("room '\(id)': reading its message at \(message.streamSeq)", log: log) { _ -> EngineRetry.Outcome<UInt64> in
            guard let next = try? client.nextMessage(stream: EngineNames.shardStream(shard), subject: subject, from: follows + 1, headerKeys: []) else {
                return .again(nil)
            }
            return .done(next.streamSeq)
        }
        return (next ?? nil) == message.streamSeq
    }

    /// Whether `message`, the last of room `id` in its shard, was written in the room's life
    /// `life` (no message of a life follows that life's tombstone, and a room created again
    /// begins another): sealed for that life, at the place its seal names.
    func isOfLife(_ message: StreamMessage, _ life: String, room id: RoomID) -> Bool {
        let subject = EngineNames.shardSubject(layout.shard(of: id), id)
        let (verdict, follows) = trust.judgeShard(seal: message.headers[EngineNames.sealHeader], subject: subject, life: life,
                                                  headers: message.headers, body: message.data)
        guard verdict == .sealed, let follows else { return false }
        return isAtPlace(message, follows: follows, of: id)
    }

    /// Whether room `id` lives in its shard now (a message that is not its tombstone last).
    func existsInShard(_ id: RoomID) throws(EngineError) -> Bool {
        guard let last = try lastInShard(id) else { return false }
        return !isTombstone(last, of: id)
    }

    /// Creates room `id` in its shard: its first message, stored only if the room's subject
    /// still ends where it was read (nothing, or the tombstone of its last life), so of
    /// nodes creating it at once exactly one succeeds; then its directory record.
    func createInShard(_ id: RoomID, tabs: [TabInfo], recordLater: Bool = false) throws(Failure) -> Bool {
        let shard = layout.shard(of: id)
        let subject = EngineNames.shardSubject(shard, id)
        let genesis = Genesis(epoch: Coordinator.newEpoch(), tabs: tabs)
        let state: StoredState
        do { state = try StoredState.genesis(tabs: genesis.tabs, epoch: genesis.epoch) } catch {
            throw Failure("cannot create room '\(id)': \(error.message)")
        }
        let msgID = "genesis-\(id)-\(genesis.epoch)"
        // Most rooms are new: the first try expects an empty subject without reading it
        // (refused if it is not, and then read).
        var expected: UInt64? = 0
        // Kept from before the room's first message: what follows it, for the room's load here.
        let follower = follower(of: shard)
        let listener = follower.listen(id)
        // Done with the place of the room's first message, or nil when the room lives.
        let result: UInt64??
        do {
            result = try EngineRetry.standard.run("room '\(id)': creating in shard \(shard)", log: log) { _ -> EngineRetry.Outcome<UInt64?> in
                if expected == nil {
                    do throws(EngineError) {
                        if let last = try lastInShard(id) {
                            if last.headers[EngineNames.messageIDHeader] == msgID { return .done(last.streamSeq) } // this call's earlier attempt
                            guard isTombstone(last, of: id) else { return .done(nil) }
                            expected = last.streamSeq
                        } else {
                            expected = 0
                        }
                    } catch { return .again("cannot read its shard yet (\(error))") }
                }
                let follows = expected!
                let seal = trust.sealStream(subject: subject, life: genesis.epoch, bound: true, kind: "genesis", follows: follows, node: name,
                                            incarnation: incarnation, messageID: msgID, forwards: nil, sealMark: EngineNames.lifeMarkValue,
                                            body: genesis.bytes)
                let headers = [(EngineNames.kindHeader, "genesis"), (EngineNames.nodeHeader, name), (EngineNames.incarnationHeader, incarnation),
                               (EngineNames.followsHeader, String(follows)), (EngineNames.sealMarkHeader, EngineNames.lifeMarkValue),
                               (EngineNames.sealHeader, seal)]
                switch client.publish(subject: subject, data: genesis.bytes, headers: headers, expectedLastSeq: follows, perSubject: true, msgID: msgID) {
                case let .stored(seq, _): return .done(seq)
                case .wrongLastSequence:
                    // Another node's first message, or this call's earlier attempt: read again.
                    expected = nil
                    return .again(nil)
                case let .unknown(why), let .failed(why): return .again("no answer yet (\(why))")
                }
            }
        } catch {
            follower.stopListening(id, listener)
            throw error
        }
        guard let outcome = result, let seq = outcome else {
            follower.stopListening(id, listener)
            if result == nil { throw Failure("cannot create room '\(id)': the engine does not answer") }
            return false
        }
        // The directory record is written while the room is opened and started; its load
        // here starts from what was just written, reading nothing.
        let record = SnapshotRecord(streamCreated: shardCreated(shard), streamSeq: seq, state: state, owners: [:],
                                    sealed: true, lifeBound: true, shard: shard, lifeStart: seq)
        let written = DispatchGroup()
        written.enter()
        DispatchQueue.global().async { [self] in
            writeRecord(record, room: id)
            written.leave()
        }
        let start = ClusterRoom.Start(state: state, from: seq, end: seq, streamCreated: shardCreated(shard), sealed: true, lifeBound: true,
                                      lifeStart: seq, recordWritten: written)
        let stale = justCreated.withLock { created -> (ShardListener, ClusterRoom.Start)? in
            defer { created[id] = (listener, start) }
            return created[id]
        }
        if let (old, _) = stale { follower.stopListening(id, old) }
        // Not loaded here after all: the listener stops keeping the room's messages.
        DispatchQueue.global().asyncAfter(deadline: .now() + 30) { [weak self] in
            guard let self else { return }
            let left = justCreated.withLock { created -> ShardListener? in
                guard let entry = created[id], entry.0 === listener else { return nil }
                created[id] = nil
                return entry.0
            }
            if let left { follower.stopListening(id, left) }
        }
        if !recordLater { written.wait() }
        return true
    }

    /// The room `id` this node has just created, taken once by its load.
    func takeJustCreated(_ id: RoomID) -> (ShardListener, ClusterRoom.Start)? {
        justCreated.withLock { $0.removeValue(forKey: id) }
    }

    /// Stores `record` as room `id`'s directory record (its latest snapshot), sealed.
    func writeRecord(_ record: SnapshotRecord, room id: RoomID) {
        let subject = EngineNames.directorySubject(id), body = record.bytes
        let headers = [(EngineNames.sealHeader, trust.sealSnapshot(subject: subject, body: body))]
        let stored = try? EngineRetry.replica.run("room '\(id)': storing its directory record", log: log) { _ -> EngineRetry.Outcome<Bool> in
            switch client.publish(subject: subject, data: body, headers: headers) {
            case .stored: return .done(true)
            case let .unknown(why), let .failed(why): return .again(why)
            case .wrongLastSequence: return .again("refused")
            }
        }
        if (stored ?? nil) == nil { log("room '\(id)': could not store its directory record; the next load writes it") }
    }

    /// Deletes room `id` from its shard: its tombstone, sealed for its life, right after its
    /// last message (so no message of that life can follow), then what came before it and
    /// its directory record are purged. False when the shard holds no live room of that id.
    func deleteFromShard(_ id: RoomID) throws(Failure) -> Bool {
        let shard = layout.shard(of: id)
        let stream = EngineNames.shardStream(shard), subject = EngineNames.shardSubject(shard, id)
        // The tombstones this call sent: one of them found last is this call's deletion.
        var sent: Set<String> = []
        let deleted = try EngineRetry.standard.run("room '\(id)': deleting", log: log) { _ throws(Failure) -> EngineRetry.Outcome<Bool> in
            let last: StreamMessage
            do throws(EngineError) {
                guard let found = try lastInShard(id) else { return .done(false) }
                last = found
            } catch { return .again("cannot read its shard (\(error))") }
            if let mine = last.headers[EngineNames.messageIDHeader], sent.contains(mine) { return .done(true) }
            if isTombstone(last, of: id) { return .done(false) }
            let life: String
            do throws(Failure) { life = try ClusterRoom.life(node: self, room: id, shard: shard) } catch {
                if !error.mayPass { throw error }
                return .again("cannot read its life (\(error))")
            }
            let body = Genesis.lifeBody(life)
            let msgID = "tombstone-\(id)-\(life)"
            sent.insert(msgID)
            let seal = trust.sealStream(subject: subject, life: life, bound: true, kind: EngineNames.tombstoneKind, follows: last.streamSeq,
                                        node: name, incarnation: incarnation, messageID: msgID, forwards: nil, sealMark: nil, body: body)
            let headers = [(EngineNames.kindHeader, EngineNames.tombstoneKind), (EngineNames.nodeHeader, name),
                           (EngineNames.incarnationHeader, incarnation), (EngineNames.followsHeader, String(last.streamSeq)),
                           (EngineNames.sealHeader, seal)]
            switch client.publish(subject: subject, data: body, headers: headers, expectedLastSeq: last.streamSeq, perSubject: true, msgID: msgID) {
            case .stored: return .done(true)
            case .wrongLastSequence: return .again(nil) // something came after it: read again
            case let .unknown(why), let .failed(why): return .again("no answer yet (\(why))")
            }
        }
        guard let deleted else { throw Failure("cannot delete room '\(id)': the engine does not answer") }
        guard deleted else { return false }
        // The room's messages before its tombstone, and its record, go.
        do {
            try client.purge(stream: stream, subject: subject, keep: 1)
            try client.purge(stream: EngineNames.directory, subject: EngineNames.directorySubject(id), keep: 0)
        } catch { log("room '\(id)': deleted, but its history was not purged yet: \(error)") }
        let notice = EngineNames.deletedPrefix + id
        client.publishCore(subject: notice, data: trust.sealCore(.deletion, subject: notice, args: [String(shardCreated(shard))]))
        return true
    }

    /// The rooms of the shards, by their directory records.
    func roomsInShards() throws(EngineError) -> [RoomID] {
        try client.subjects(stream: EngineNames.directory, filter: "tabd.dir.*").filter { $0.value > 0 }
            .compactMap { key, _ in key.hasPrefix("tabd.dir.") ? String(key.dropFirst("tabd.dir.".count)) : nil }
    }
}

extension Genesis {
    /// A tombstone's body: the life it ends.
    static func lifeBody(_ life: String) -> [UInt8] { JSONValue.object([("epoch", .string(life))]).compactBytes }

    static func life(in body: [UInt8]) throws -> String {
        guard let life = try JSONParser.parse(body)["epoch"]?.stringValue else { throw WireError("not a tombstone") }
        return life
    }
}
