import Coordinator
import Dispatch
import FoundationEssentials
import Glibc
import JetStream
import Locking
import Synchronization

/// One room of a cluster node: its ``Durability`` (batches appended to the room's log with
/// a compare-and-set on the room's last message) and its view of that log, this node's
/// batches and the others'.
///
/// A room lives in one of two places (``Place``): a subject of a shard stream, followed by
/// the shard's one follower on this node (the layout of new rooms), or a stream of its own
/// with a consumer of its own (the layout of tabd before shards).
///
/// Every decision is ``ClusterRoomMachine``'s (where a batch lands, what an answer of the
/// engine means, what a delivered message changes, when the consumer is stalled): this
/// class feeds it the engine's answers, the delivered messages and the timers, and
/// performs what it returns: publishes on a queue of its own, timers, callbacks.
public final class ClusterRoom: Durability, Sendable {
    public let room: RoomID
    let node: ClusterNode
    let stream: String
    let subject: String
    let resumeWindow: Int
    /// The stream's creation time: snapshots name it, so none outlives its incarnation.
    let streamCreated: Int64
    /// The room's life (its epoch): every message this node seals for the room binds it.
    let life: String
    let place: Place
    /// A room created here: its directory record being written (``recordStored()``).
    private let recordWritten: DispatchGroup?
    private let state: Locked<Shell>
    /// Sends publications in the order the machine asks for them (their answers come back
    /// on libnats' thread).
    private let publishing: DispatchQueue
    private let caughtUp = DispatchSemaphore(value: 0)
    /// A stream of its own: the room's consumer.
    private let subscription = Locked<OrderedSubscription?>(nil)
    /// Runs the consumer's watch while stored batches wait for it.
    private let watchdog: DispatchQueue
    /// Told (on the engine's thread) when another node's batches arrived.
    private let foreign = Locked<Handler?>(nil)
    /// Told when the room's tombstone arrived (it was deleted).
    private let gone = Locked<Handler?>(nil)
    /// While loading: something read was sealed with a key other than the one this node
    /// seals with (a key being rotated out), so the room gets a snapshot of this key.
    private let readOtherKey = Locked(false)
    /// Threads waiting for the machine to reach a state (``waitUntil(deadline:_:)``), woken
    /// by every step while any waits.
    private let wakers = Locked<[DispatchSemaphore]>([])
    private let waiting = Atomic<Int>(0)

    /// Where the room's messages are.
    enum Place: Sendable {
        /// A stream of its own (`TABD_ROOM_ID`, subject `tabd.room.ID`), ordered by the
        /// stream's last sequence: the layout before shards.
        case ownStream
        /// The subject `tabd.r.SHARD.ID` of a shard stream, ordered by the subject's last
        /// sequence; the shard's follower hands this room its messages.
        case shard(Int, ShardFollower, ShardListener)

        var shard: Int? { if case let .shard(n, _, _) = self { n } else { nil } }
    }

    /// The machine, the callbacks its waits stand for, and what it asked for that is not
    /// performed yet.
    private struct Shell {
        var machine: ClusterRoomMachine
        var waiters: [ClusterRoomMachine.Waiter: @Sendable (CommandError?) -> Void] = [:]
        var nextWaiter: ClusterRoomMachine.Waiter = 0
        /// The machine's actions in the order it returned them, until performed
        /// (``performInOrder()``); `performing` while a thread performs them.
        var outbox: [ClusterRoomMachine.Action] = []
        var performing = false
    }

    /// What a load read: the room's state where it starts, and what follows.
    struct Start {
        var state: StoredState
        var owners: [ClientID: String] = [:]
        var incarnations: [String: String] = [:]
        /// The stream sequence `state` stands at, and the room's last when it was read.
        var from: UInt64
        var end: UInt64
        var streamCreated: Int64
        var sealed = false
        var lifeBound = false
        /// Loaded from an unsealed snapshot or first message (phase one of the move to seals).
        var unsealedStart = false
        /// In a shard: where the room's life began, the messages read after `from`, and
        /// whether the room's directory record is missing or stale (it is written again).
        var lifeStart: UInt64?
        var tail: [StreamMessage] = []
        var rewriteRecord = false
        /// A room just created here: its directory record being written meanwhile.
        var recordWritten: DispatchGroup?
    }

    /// Room `id` loaded from its shard, or nil when the shard holds no life of it.
    static func openInShard(node: ClusterNode, room: RoomID, resumeWindow: Int, attempts: Int) throws(ClusterNode.Failure) -> ClusterRoom? {
        let shard = node.layout.shard(of: room)
        let follower = node.follower(of: shard)
        // Created here a moment ago: started from its first message, with what the follower
        // kept since before it.
        if let (listener, start) = node.takeJustCreated(room) {
            do {
                return try ClusterRoom(node: node, room: room, resumeWindow: resumeWindow, place: .shard(shard, follower, listener), start: start)
            } catch {
                follower.stopListening(room, listener)
                throw error
            }
        }
        // Kept from now on: what the follower delivers while the room is read.
        let listener = follower.listen(room)
        do {
            guard let start = try loadFromShard(node: node, room: room, shard: shard, attempts: attempts) else {
                follower.stopListening(room, listener)
                return nil
            }
            return try ClusterRoom(node: node, room: room, resumeWindow: resumeWindow, place: .shard(shard, follower, listener), start: start)
        } catch {
            follower.stopListening(room, listener)
            throw error
        }
    }

    /// Room `id` loaded from a stream of its own (made by a tabd before shards).
    static func openOwnStream(node: ClusterNode, room: RoomID, resumeWindow: Int, attempts: Int) throws(ClusterNode.Failure) -> ClusterRoom {
        try ClusterRoom(node: node, room: room, resumeWindow: resumeWindow, place: .ownStream,
                        start: loadFromOwnStream(node: node, room: room, attempts: attempts))
    }

    /// Reads `attempt` up to `attempts` times while the engine answers errors (a stream
    /// being created, a leader being elected), pausing between tries.
    private static func tried<T>(_ attempts: Int, _ room: RoomID, _ body: () throws -> T) throws(ClusterNode.Failure) -> T {
        var last: any Error = ClusterNode.Failure("cannot load room '\(room)'")
        let retry = EngineRetry(attempts: attempts, step: EngineRetry.standard.step, longest: EngineRetry.standard.longest)
        let value = try retry.run("room '\(room)': loading", log: { _ in }) { _ -> EngineRetry.Outcome<T> in
            // Every failure is asked again: right after a room's stream is made (or a replica
            // restarts) its messages are not readable at once.
            do { return .done(try body()) } catch {
                last = error
                return .again(nil)
            }
        }
        if let value { return value }
        throw ClusterNode.Failure((last as? ClusterNode.Failure)?.description ?? "cannot load room '\(room)': \(last)", mayPass: true)
    }

    /// A room of a shard: its directory record (its latest snapshot) if it is of the room's
    /// current life, else the room's first message of that life; then its messages after
    /// that, read without a consumer; nil when the shard holds nothing of the room.
    private static func loadFromShard(node: ClusterNode, room: RoomID, shard: Int, attempts: Int) throws(ClusterNode.Failure) -> Start? {
        let client = node.client, trust = node.trust
        let stream = EngineNames.shardStream(shard), subject = EngineNames.shardSubject(shard, room)
        let created = node.shardCreated(shard)
        let keys = headerKeys
        let recordSubject = EngineNames.directorySubject(room)
        return try tried(attempts, room) { () throws -> Start? in
            // The room's last message, from the shard's leader.
            guard let last = try client.lastMessage(stream: stream, subject: subject, headerKeys: keys) else { return nil }
            var record: SnapshotRecord?
            // A record sealed with a key being rotated out is written again with this node's.
            var otherKey = false
            if let message = try client.lastMessage(stream: EngineNames.directory, subject: recordSubject, headerKeys: [EngineNames.sealHeader]),
               !message.data.isEmpty {
                switch trust.judgeSnapshot(seal: message.headers[EngineNames.sealHeader], subject: recordSubject, body: message.data) {
                case .sealed:
                    record = try? SnapshotRecord(bytes: message.data)
                    otherKey = trust.isOtherKey(message.headers[EngineNames.sealHeader])
                default: node.rejected("snapshot", "room '\(room)': its directory record is not sealed by a node; loaded from its shard instead")
                }
            }
            // A record is of the room's current life when the room's last message is the one
            // it was taken at (a shard never numbers two messages alike), or one sealed for
            // its life at the place its seal names.
            if let record, record.shard == shard, record.streamCreated == created, let lifeStart = record.lifeStart,
               record.streamSeq >= lifeStart, record.streamSeq <= last.streamSeq,
               last.streamSeq == record.streamSeq || node.isOfLife(last, record.state.epoch, room: room) {
                let tail = try Self.read(client, stream: stream, subject: subject, after: record.streamSeq, through: last.streamSeq, keys: keys)
                return Start(state: record.state, owners: record.owners, incarnations: record.incarnations, from: record.streamSeq,
                             end: last.streamSeq, streamCreated: created, sealed: true, lifeBound: true, lifeStart: lifeStart, tail: tail,
                             rewriteRecord: otherKey)
            }
            // No record of this life: the room's messages from the first the shard keeps, and
            // its life from the last first message (`genesis`) sealed for it at its place.
            let all = try Self.read(client, stream: stream, subject: subject, after: 0, through: last.streamSeq, keys: keys)
            var begin: Int?
            // A life begins with the room's first message, or with the snapshot of a room moved
            // in from a stream of its own.
            for (i, message) in all.enumerated().reversed()
            where message.headers[EngineNames.kindHeader] == "genesis" || message.headers[EngineNames.kindHeader] == EngineNames.movedKind {
                guard let life = Self.lifeStarted(by: message) else { continue }
                let (verdict, follows) = trust.judgeShard(seal: message.headers[EngineNames.sealHeader], subject: subject, life: life,
                                                          headers: message.headers, body: message.data)
                // At its place: after the message before it (the first kept may follow one gone).
                if verdict == .sealed, i == 0 || follows == all[i - 1].streamSeq { begin = i; break }
                node.rejected("batch", "room '\(room)': a first message at stream seq \(message.streamSeq) of its shard that is not believed")
            }
            guard let begin else {
                // Deleted (its tombstone last) or never created here.
                if last.headers[EngineNames.kindHeader] == EngineNames.tombstoneKind { return nil }
                throw ClusterNode.Failure("room '\(room)' has neither a record nor a first message its shard keeps")
            }
            let first = all[begin].streamSeq
            var start: Start
            if all[begin].headers[EngineNames.kindHeader] == EngineNames.movedKind, let moved = try? SnapshotRecord(bytes: all[begin].data) {
                start = Start(state: moved.state, owners: moved.owners, incarnations: moved.incarnations, from: first, end: last.streamSeq,
                              streamCreated: created, sealed: true, lifeBound: true)
            } else if let genesis = try? Genesis(bytes: all[begin].data) {
                do {
                    start = Start(state: try StoredState.genesis(tabs: genesis.tabs, epoch: genesis.epoch), from: first, end: last.streamSeq,
                                  streamCreated: created, sealed: true, lifeBound: true)
                } catch let error as CommandError { throw ClusterNode.Failure("room '\(room)': \(error.message)") }
            } else {
                throw ClusterNode.Failure("room '\(room)': its first message in its shard does not read")
            }
            start.lifeStart = first
            start.tail = Array(all[(begin + 1)...])
            start.rewriteRecord = true
            return start
        }
    }

    /// The life a room's first message in a shard begins (a `genesis`'s epoch, or the epoch
    /// of the snapshot a `moved` one holds), if it reads.
    static func lifeStarted(by message: StreamMessage) -> String? {
        switch message.headers[EngineNames.kindHeader] {
        case "genesis"?: (try? Genesis(bytes: message.data))?.epoch
        case EngineNames.movedKind?: (try? SnapshotRecord(bytes: message.data))?.state.epoch
        default: nil
        }
    }

    /// The life (epoch) room `id` of `shard` is in now, as a load reads it.
    static func life(node: ClusterNode, room: RoomID, shard: Int) throws(ClusterNode.Failure) -> String {
        guard let start = try loadFromShard(node: node, room: room, shard: shard, attempts: 1) else { throw ClusterNode.Failure("no room '\(room)'") }
        return start.state.epoch
    }

    /// The messages on `subject` after stream seq `after` through `through`, read one by one
    /// with direct gets; a replica that has not got the last yet is asked again.
    private static func read(_ client: EngineClient, stream: String, subject: String, after: UInt64, through: UInt64,
                             keys: [String]) throws(ClusterNode.Failure) -> [StreamMessage] {
        var out: [StreamMessage] = []
        var next = after + 1
        while next <= through {
            // A replica behind the leader answers nothing there yet: asked again (another may answer).
            let found = try EngineRetry.replica.run("\(subject): reading", log: { _ in }) { _ throws(ClusterNode.Failure) -> EngineRetry.Outcome<StreamMessage> in
                do throws(EngineError) {
                    guard let message = try client.nextMessage(stream: stream, subject: subject, from: next, headerKeys: keys),
                          message.streamSeq <= through else { return .again(nil) }
                    return .done(message)
                } catch { throw ClusterNode.Failure("cannot read \(subject): \(error)", mayPass: true) }
            }
            guard let message = found else {
                throw ClusterNode.Failure("\(subject): no replica holds its messages up to \(through) yet", mayPass: true)
            }
            out.append(message)
            next = message.streamSeq + 1
        }
        return out
    }

    /// A room with a stream of its own: its latest snapshot (else its first message).
    private static func loadFromOwnStream(node: ClusterNode, room: RoomID, attempts: Int) throws(ClusterNode.Failure) -> Start {
        let client = node.client, trust = node.trust
        let stream = EngineNames.stream(room), subject = EngineNames.subject(room)
        let snapshotSubject = EngineNames.snapshotSubject(room)
        /// Why the room cannot be loaded here, whatever the engine answers next.
        var refused: ClusterNode.Failure?
        let start = try tried(attempts, room) { () throws -> Start in
            refused = nil
            guard let info = try client.streamInfo(stream) else { throw ClusterNode.Failure("no room '\(room)'") }
            var snapshot: SnapshotRecord?
            var snapshotVerdict = EngineTrust.Verdict.sealed
            var snapshotOtherKey = false
            if let message = try client.lastMessage(stream: EngineNames.snapshots, subject: snapshotSubject, headerKeys: [EngineNames.sealHeader]),
               !message.data.isEmpty {
                snapshotVerdict = trust.judgeSnapshot(seal: message.headers[EngineNames.sealHeader], subject: snapshotSubject, body: message.data)
                snapshotOtherKey = trust.isOtherKey(message.headers[EngineNames.sealHeader])
                switch snapshotVerdict {
                case .sealed: snapshot = try? SnapshotRecord(bytes: message.data)
                case .unsigned where trust.acceptUnsigned: snapshot = try? SnapshotRecord(bytes: message.data)
                case .unsigned, .forged, .sealedUnbound:
                    node.rejected("snapshot", "room '\(room)': its snapshot \(snapshotVerdict == .forged ? "has a seal that does not open" : "is not sealed"); loaded from its stream instead")
                }
            }
            if let record = snapshot, record.shard == nil, record.fits(info) {
                // A snapshot sealed with a key being rotated out is stored again with this node's.
                return Start(state: record.state, owners: record.owners, incarnations: record.incarnations, from: record.streamSeq,
                             end: info.lastSeq, streamCreated: info.created, sealed: record.sealed && snapshotVerdict == .sealed,
                             lifeBound: record.lifeBound && snapshotVerdict == .sealed, unsealedStart: snapshotVerdict != .sealed,
                             rewriteRecord: snapshotVerdict == .sealed && snapshotOtherKey)
            }
            guard let first = try client.message(stream: stream, seq: 1, headerKeys: headerKeys), let genesis = try? Genesis(bytes: first.data) else {
                throw ClusterNode.Failure("room '\(room)' has neither a snapshot nor its first message")
            }
            var start: Start
            do {
                start = Start(state: try StoredState.genesis(tabs: genesis.tabs, epoch: genesis.epoch), from: 1, end: info.lastSeq, streamCreated: info.created)
            } catch let error as CommandError { throw ClusterNode.Failure("room '\(room)': \(error.message)") }
            switch trust.judgeStream(seal: first.headers[EngineNames.sealHeader], subject: subject, life: genesis.epoch, seq: 1,
                                     headers: first.headers, body: first.data) {
            case let verdict where verdict.isNodeSeal:
                start.sealed = first.headers[EngineNames.sealMarkHeader] != nil
                start.lifeBound = verdict == .sealed && first.headers[EngineNames.sealMarkHeader] == EngineNames.lifeMarkValue
                start.rewriteRecord = trust.isOtherKey(first.headers[EngineNames.sealHeader])
            case .unsigned where trust.acceptUnsigned:
                start.unsealedStart = true
            case .unsigned:
                node.rejected("batch", "room '\(room)': its first message is not sealed, and it has no sealed snapshot")
                refused = ClusterNode.Failure("room '\(room)' holds nothing sealed to load from: open it once on a node started with --cluster-unsigned accept (docs/CLUSTER.md)")
            default:
                node.rejected("batch", "room '\(room)': its first message has a seal that does not open")
                refused = ClusterNode.Failure("room '\(room)': its first message has a seal that does not open (another cluster secret?)")
            }
            return start
        }
        if let refused { throw refused }
        return start
    }

    private init(node: ClusterNode, room: RoomID, resumeWindow: Int, place: Place, start: Start) throws(ClusterNode.Failure) {
        self.node = node
        self.room = room
        self.resumeWindow = resumeWindow
        self.place = place
        switch place {
        case .ownStream:
            stream = EngineNames.stream(room)
            subject = EngineNames.subject(room)
        case let .shard(n, _, _):
            stream = EngineNames.shardStream(n)
            subject = EngineNames.shardSubject(n, room)
        }
        publishing = DispatchQueue(label: "tabd.cluster.\(room)")
        watchdog = DispatchQueue(label: "tabd.cluster.\(room).watch")
        streamCreated = start.streamCreated
        life = start.state.epoch
        recordWritten = start.recordWritten
        let machine = ClusterRoomMachine(room: room, start: start.state, owners: start.owners, incarnations: start.incarnations, from: start.from,
                                         streamEnd: start.end, streamCreated: start.streamCreated, resumeWindow: resumeWindow,
                                         messageIDPrefix: "\(node.name)-\(room)-\(String(UInt64.random(in: 0...UInt64.max), radix: 36))",
                                         sealed: start.sealed, lifeBound: start.lifeBound, shard: place.shard, lifeStart: start.lifeStart)
        state = Locked(Shell(machine: machine))
        if !machine.loading { caughtUp.signal() }
        switch place {
        case .ownStream:
            do {
                let sub = try follow(from: start.from + 1)
                subscription.withLock { $0 = sub }
            } catch { throw ClusterNode.Failure("cannot follow room '\(room)': \(error)") }
        case let .shard(_, _, listener):
            // What was read, then what the shard's follower kept meanwhile, and on.
            for message in start.tail { received(message) }
            listener.attach { [weak self] message in self?.received(message) }
        }
        if caughtUp.wait(timeout: .now() + 30) == .timedOut {
            close()
            throw ClusterNode.Failure("room '\(room)': the engine did not deliver its batches within 30 s")
        }
        if state.withLock({ $0.machine.deleted }) { close(); throw ClusterNode.Failure("no room '\(room)'") }
        if let broken = state.withLock({ $0.machine.broken }) { close(); throw ClusterNode.Failure(broken) }
        if case .ownStream = place, node.trust.sealsLives(), !state.withLock({ $0.machine.lifeBound || $0.machine.movedOut }) { markLife() }
        // A room loaded from an unsealed start (phase one of the move to seals), or whose
        // history read holds messages of another key (one being rotated out), gets a
        // snapshot sealed with this node's key: nodes load it from there on, without them.
        // So does a room of a shard whose directory record is missing or of another life.
        if start.unsealedStart || start.rewriteRecord || readOtherKey.withLock({ $0 }) { store(state.withLock { $0.machine.snapshotRecord }) }
    }

    /// Appends the room's life mark (this node requires seals bound to the room's life; the
    /// room's history so far is as stored), and waits until the consumer delivered one. A
    /// life mark holds at any place, so it is appended without a compare-and-set: no one
    /// appending other messages keeps it out. Tried for up to about 15 s while the engine
    /// refuses it; without it the room still works, and the next node to load it tries again.
    private func markLife() {
        let client = node.client, trust = node.trust
        let msgID = "\(node.name)-\(room)-life-\(node.incarnation)"
        let seal = trust.sealStream(subject: subject, life: life, bound: true, kind: EngineNames.sealMarkKind, follows: nil, node: node.name,
                                    incarnation: node.incarnation, messageID: msgID, forwards: nil, sealMark: EngineNames.lifeMarkValue, body: [])
        let headers = [(EngineNames.kindHeader, EngineNames.sealMarkKind), (EngineNames.nodeHeader, node.name),
                       (EngineNames.incarnationHeader, node.incarnation), (EngineNames.sealMarkHeader, EngineNames.lifeMarkValue),
                       (EngineNames.sealHeader, seal)]
        let deadline = DispatchTime.now().uptimeNanoseconds + 15_000_000_000
        var attempt = 0
        while DispatchTime.now().uptimeNanoseconds < deadline {
            attempt += 1
            // The same id every time: the engine stores it once.
            if case .stored = client.publish(subject: subject, data: [], headers: headers, msgID: msgID) {
                // What the consumer delivers decides.
                if waitUntil(deadline: deadline, { $0.lifeBound || $0.broken != nil }) {
                    node.log("room '\(room)': marked bound to its life; every later message of it must be sealed so")
                    return
                }
                break
            }
            if attempt % 10 == 0 { node.log("room '\(room)': cannot mark it bound to its life yet; trying again") }
            Threads.sleep(seconds: 0.3)
        }
        node.log("room '\(room)': could not mark it bound to its life; its messages sealed without it are still taken until a node does")
    }

    /// Called with every later batch of other nodes (on the engine's thread; quick).
    public func onForeignBatches(_ handler: @escaping @Sendable () -> Void) {
        foreign.withLock { $0 = Handler(handler) }
    }

    /// Called when the room's tombstone arrives: another node deleted it.
    public func onGone(_ handler: @escaping @Sendable () -> Void) {
        gone.withLock { $0 = Handler(handler) }
    }

    /// An ordered consumer of the room's stream from `seq` on, feeding ``received(_:)``.
    private func follow(from seq: UInt64) throws(EngineError) -> OrderedSubscription {
        let node = node, room = room
        return try node.client.subscribeOrdered(stream: stream, subject: subject, startSeq: seq, headerKeys: Self.headerKeys,
                                                report: { report in
            switch report {
            case let .duplicate(why):
                // Two messages for one place of the consumer: one was put into its inbox by
                // someone other than the engine.
                node.rejected("delivery", "room '\(room)': \(why)")
            case let .restarted(from, why, count):
                node.stats.refollowed()
                if count == 1 || count % 20 == 0 {
                    node.log("room '\(room)': following its stream again from \(from): \(why)" + (count > 1 ? " (\(count) times since its last message)" : ""))
                }
            }
        }) { [weak self] message in
            self?.received(message)
        }
    }

    // MARK: Performing the machine's actions

    /// Runs `input` on the machine and performs what it returns, after what every earlier
    /// step returned (``performInOrder()``).
    private func step(_ input: (inout ClusterRoomMachine) -> [ClusterRoomMachine.Action]) {
        let conflicts = state.withLock { s in
            let before = s.machine.conflicts
            s.outbox += input(&s.machine)
            return s.machine.conflicts - before
        }
        for _ in 0..<conflicts { node.stats.conflict() }
        if waiting.load(ordering: .acquiring) > 0 { for waker in wakers.withLock({ $0 }) { waker.signal() } }
        performInOrder()
    }

    /// Performs the machine's actions in the order it returned them, whichever threads
    /// step it (the consumer's, libnats' answers, the watchdog, the coordinator's
    /// appends): one thread at a time performs, and takes what others added meanwhile.
    /// The coordinator must learn that a batch committed before it learns that a later
    /// one failed: a rollback decides again every command it has not seen committed, and
    /// one that was (already in the committed state it rolls back to) was applied twice.
    private func performInOrder() {
        var actions = state.withLock { s -> [ClusterRoomMachine.Action] in
            guard !s.performing, !s.outbox.isEmpty else { return [] }
            s.performing = true
            defer { s.outbox = [] }
            return s.outbox
        }
        while !actions.isEmpty {
            perform(actions)
            actions = state.withLock { s in
                if s.outbox.isEmpty { s.performing = false }
                defer { s.outbox = [] }
                return s.outbox
            }
        }
    }

    private func perform(_ actions: [ClusterRoomMachine.Action]) {
        for action in actions {
            switch action {
            case let .report(waiter, error):
                state.withLock { $0.waiters.removeValue(forKey: waiter) }?(error)
            case let .publish(publication):
                publishing.async { self.send(publication) }
            case let .publishLater(publication, after):
                publishing.asyncAfter(deadline: .now() + after.dispatch) { self.send(publication) }
            case .foreignBatches:
                foreign.withLock { $0 }?.run()
            case let .storeSnapshot(record):
                store(record)
            case let .watch(after):
                watchdog.asyncAfter(deadline: .now() + after.dispatch) { [weak self] in
                    guard let self else { return }
                    self.step { $0.checkDelivery(now: DispatchTime.now().uptimeNanoseconds) }
                }
            case let .refollow(from, missed):
                switch place {
                case .ownStream:
                    // A round trip to the engine: not on whichever thread performs (it may be
                    // the consumer's own).
                    watchdog.async { [weak self] in self?.refollow(from: from) }
                case let .shard(_, follower, _):
                    // The shard's follower serves every room of the shard here: a stall
                    // follows again from where it is, a message that was not the stream's
                    // from there.
                    follower.restart(from: missed ? from : nil, why: missed ? "room '\(room)': a delivery was not the stream's" : "room '\(room)': stalled")
                }
            case .deleted, .moved:
                gone.withLock { $0 }?.run()
            case .caughtUp:
                caughtUp.signal()
            case let .log(line):
                node.log(line)
            case let .rejected(kind, why):
                node.rejected(kind, why)
            case let .readBack(seq):
                readBack(seq: seq)
            }
        }
    }

    /// One attempt of a publication (on the publishing queue, so that the messages of the
    /// chain go out in the order the machine made them); the answer goes to the machine.
    private func send(_ publication: ClusterRoomMachine.Publication) {
        guard state.withLock({ $0.machine.isInFlight(publication) }) else { return } // closed or settled meanwhile
        let sent = DispatchTime.now().uptimeNanoseconds
        let stats = node.stats
        let body = publication.data
        var headers = [(EngineNames.nodeHeader, node.name), (EngineNames.incarnationHeader, node.incarnation)]
        if let forwards = publication.forwardsHeader { headers.append((EngineNames.forwardsHeader, forwards)) }
        let inShard = place.shard != nil
        if inShard { headers.append((EngineNames.followsHeader, String(publication.expectedLastSeq))) }
        let bound = inShard || node.trust.sealsLives(roomBound: state.withLock { $0.machine.lifeBound })
        headers.append((EngineNames.sealHeader, node.trust.sealStream(subject: subject, life: life, bound: bound, kind: nil,
                                                                      follows: publication.expectedLastSeq, node: node.name,
                                                                      incarnation: node.incarnation, messageID: publication.messageID,
                                                                      forwards: publication.forwardsHeader, sealMark: nil, body: body)))
        node.client.publishAsync(subject: subject, data: body, headers: headers,
                                 expectedLastSeq: publication.expectedLastSeq, perSubject: inShard,
                                 expectedLastMessageID: inShard ? nil : publication.expectedLastMessageID,
                                 msgID: publication.messageID) { [weak self] result in
            let now = DispatchTime.now().uptimeNanoseconds
            stats.published(seconds: Double(now - sent) / 1e9, batches: publication.batches.count)
            if publication.attempt > 0 { stats.retried() }
            let outcome: ClusterRoomMachine.PublishOutcome = switch result {
            case let .stored(seq, _): .stored(seq: seq)
            case .wrongLastSequence: .wrongLastSequence
            case let .unknown(why): .unknown(why)
            case let .failed(why): .failed(why)
            }
            self?.step { $0.published(publication, outcome, now: now) }
        }
    }

    /// Reads the message at `seq` from the stream (not from the consumer's inbox) for the
    /// machine: on the watchdog's queue, asked again while the engine does not answer.
    private func readBack(seq: UInt64) {
        watchdog.async { [weak self] in
            guard let self, !self.state.withLock({ $0.machine.closed }) else { return }
            do {
                // In a shard, a message of another room at that place is not this one.
                let found = try self.node.client.message(stream: self.stream, seq: seq, headerKeys: Self.headerKeys)
                    .flatMap { $0.subject == self.subject ? $0 : nil }
                self.step { $0.readBack(seq: seq, found: found.map(self.delivery), now: DispatchTime.now().uptimeNanoseconds) }
            } catch {
                self.watchdog.asyncAfter(deadline: .now() + .milliseconds(250)) { [weak self] in self?.readBack(seq: seq) }
            }
        }
    }

    /// Replaces the consumer by one from `from` on. Messages both deliver are taken once
    /// (the machine skips what it has seen).
    private func refollow(from: UInt64) {
        guard let sub = try? follow(from: from) else { return }
        node.stats.refollowed()
        let old = subscription.withLock { current -> OrderedSubscription? in
            defer { current = sub }
            return current
        }
        state.withLock { $0.machine.refollowed(now: DispatchTime.now().uptimeNanoseconds) }
        // Unsubscribing asks the engine to delete the old consumer, which may wait out a
        // timeout on a dead server: not on this queue.
        if let old { DispatchQueue.global().async { old.cancel() } }
        // close() may have run in between: it cancelled the old one, not this one.
        if state.withLock({ $0.machine.closed }) { sub.cancel() }
    }

    /// Where the room stands in the engine now, against what this node loaded.
    public enum Standing: Sendable, Equatable {
        /// As loaded: this life, in this place.
        case current
        /// Deleted (perhaps created again since): its clients are closed with 4404.
        case gone
        /// Moved into its shard from a stream of its own, the same life: its clients
        /// reconnect and resume there.
        case moved
    }

    /// Whether the room's stream is still the one this room was loaded from: false once
    /// the room was deleted (and perhaps created again) elsewhere, or moved.
    public func streamIsCurrent() throws(ClusterNode.Failure) -> Bool { try standing() == .current }

    public func standing() throws(ClusterNode.Failure) -> Standing {
        guard place.shard != nil else {
            if state.withLock({ $0.machine.movedOut }) { return .moved }
            do {
                if try node.client.streamInfo(stream)?.created == streamCreated { return .current }
                // Gone from its stream: moved (this life in its shard), or deleted.
                let shard = node.layout.shard(of: room)
                guard try node.existsInShard(room) else { return .gone }
                return try Self.life(node: node, room: room, shard: shard) == life ? .moved : .gone
            } catch let error as ClusterNode.Failure { throw error } catch {
                throw ClusterNode.Failure("cannot read room '\(room)': \(error)")
            }
        }
        return try shardHoldsThisLife() ? .current : .gone
    }

    private func shardHoldsThisLife() throws(ClusterNode.Failure) -> Bool {
        if state.withLock({ $0.machine.deleted }) { return false }
        let last: StreamMessage?
        do { last = try node.client.lastMessage(stream: stream, subject: subject, headerKeys: Self.headerKeys) } catch {
            throw ClusterNode.Failure("cannot read room '\(room)': \(error)")
        }
        guard let last, node.shardCreated(place.shard!) == streamCreated else { return false }
        if last.streamSeq <= state.withLock({ $0.machine.delivered }) { return true }
        // Something newer than what was delivered here. Sealed for this life: the room goes
        // on unless it is its tombstone (a copy of one of its messages put there changes
        // nothing: what ends the life, if it came, the shard's follower delivers in order).
        // Else it is another life's, or forged: the room's directory record says which life
        // the room is in. Nothing here reads more than two messages: after a reconnect every
        // loaded room asks at once.
        let verdict = node.trust.judgeShard(seal: last.headers[EngineNames.sealHeader], subject: subject, life: life,
                                            headers: last.headers, body: last.data).verdict
        if verdict == .sealed { return last.headers[EngineNames.kindHeader] != EngineNames.tombstoneKind }
        let recordSubject = EngineNames.directorySubject(room)
        let message: StreamMessage?
        do { message = try node.client.lastMessage(stream: EngineNames.directory, subject: recordSubject, headerKeys: [EngineNames.sealHeader]) } catch {
            throw ClusterNode.Failure("cannot read room '\(room)': \(error)")
        }
        guard let message, node.trust.judgeSnapshot(seal: message.headers[EngineNames.sealHeader], subject: recordSubject, body: message.data) == .sealed,
              let record = try? SnapshotRecord(bytes: message.data), record.shard == place.shard else { return true }
        return record.state.epoch == life
    }

    /// Stops following the stream; every wait fails.
    public func close() {
        subscription.withLock { $0 }?.cancel()
        if case let .shard(_, follower, listener) = place { follower.stopListening(room, listener) }
        foreign.withLock { $0 = nil }
        gone.withLock { $0 = nil }
        step { $0.close() }
    }

    /// Other nodes append to the room's stream too.
    public var hasOtherWriters: Bool { true }

    /// The clients whose node is dead (or is this node in an earlier life, when
    /// `includingOwn`): they left without anyone saying so.
    public func orphans(includingOwn: Bool) -> Set<ClientID> {
        state.withLock { $0.machine.orphans(node: node.name, includingOwn: includingOwn, isAlive: node.isAlive(_:incarnation:)) }
    }

    /// In a counted room, the nodes whose counted clients are gone with them (dead, or
    /// this node in an earlier life when `includingOwn`).
    public func deadShares(includingOwn: Bool) -> Set<String> {
        state.withLock { $0.machine.deadShares(node: node.name, includingOwn: includingOwn, isAlive: node.isAlive(_:incarnation:)) }
    }

    /// The life of `node` that wrote its last message in the room's stream.
    public func incarnation(of node: String) -> String? { state.withLock { $0.machine.incarnations[node] } }

    /// The node a listed client joined on.
    public func owner(of client: ClientID) -> String? { state.withLock { $0.machine.owner(of: client) } }

    /// How many of this node's batches found another node's batch at their place.
    public var conflicts: Int { state.withLock { $0.machine.conflicts } }

    /// Whether the room's seal mark was delivered: every later message of it must be sealed.
    public var sealed: Bool { state.withLock { $0.machine.sealed } }

    /// Why the room stopped working (a batch in the stream that does not fold), if it did.
    public var broken: String? { state.withLock { $0.machine.broken } }

    // MARK: Durability

    public func committedState() -> StoredState { state.withLock { $0.machine.stored } }

    public func reset(generation: Int) {
        state.withLock { $0.machine.reset(generation: generation) }
    }

    public func append(_ batch: EventBatch, generation: Int, done: @escaping @Sendable (CommandError?) -> Void) {
        append(batch, generation: generation, commandKey: nil, done: done)
    }

    public func append(_ batch: EventBatch, generation: Int, commandKey: String, done: @escaping @Sendable (CommandError?) -> Void) {
        append(batch, generation: generation, commandKey: Optional(commandKey), done: done)
    }

    private func append(_ batch: EventBatch, generation: Int, commandKey: String?, done: @escaping @Sendable (CommandError?) -> Void) {
        state.withLock { s in
            let waiter = s.nextWaiter
            s.nextWaiter += 1
            s.waiters[waiter] = done
            s.outbox += s.machine.append(batch, generation: generation, waiter: waiter, commandKey: commandKey)
        }
        performInOrder()
    }

    public func storedOutcome(_ commandKey: String) -> KeyedOutcome? { state.withLock { $0.machine.storedOutcome(commandKey) } }

    public func recordOutcome(after seq: Int, record: KeyedOutcome, generation: Int, commandKey: String,
                      done: @escaping @Sendable (CommandError?) -> Void) {
        // The test-only switch that shows the fault rounds' checker catching what fences prevent.
        if Self.fencesOff { return done(nil) }
        state.withLock { s in
            let waiter = s.nextWaiter
            s.nextWaiter += 1
            s.waiters[waiter] = done
            s.outbox += s.machine.fence(.init(after: seq, id: commandKey, record: record), generation: generation, waiter: waiter)
        }
        performInOrder()
    }

    /// `TABD_TEST_NO_FENCE=1`: a forwarded command that changes nothing is answered without
    /// its fence, as before fences, so that two nodes can decide it (a test shows the
    /// fault rounds' checker catching that). Never for a real cluster.
    static let fencesOff = ProcessInfo.processInfo.environment["TABD_TEST_NO_FENCE"] == "1"

    public func published(through seq: Int) { state.withLock { $0.machine.published(through: seq) } }

    /// Waits until the directory record of a room created here is stored (a room is listed
    /// once its creation is answered); at once for any other.
    public func recordStored() {
        recordWritten?.wait()
    }

    /// Reads the machine (under the room's lock).
    func withMachine<T>(_ read: (ClusterRoomMachine) -> T) -> T { state.withLock { read($0.machine) } }

    /// Waits until `done` holds of the machine, or `deadline` (uptime nanoseconds) passes:
    /// woken by the machine's steps, not by polling. False at the deadline.
    func waitUntil(deadline: UInt64, _ done: (ClusterRoomMachine) -> Bool) -> Bool {
        let waker = DispatchSemaphore(value: 0)
        wakers.withLock { $0.append(waker) }
        waiting.add(1, ordering: .releasing)
        defer {
            waiting.subtract(1, ordering: .releasing)
            wakers.withLock { $0.removeAll { $0 === waker } }
        }
        while !withMachine(done) {
            guard DispatchTime.now().uptimeNanoseconds < deadline,
                  waker.wait(timeout: DispatchTime(uptimeNanoseconds: deadline)) == .success else { return withMachine(done) }
        }
        return true
    }

    /// The room as delivered here, as a snapshot record would hold it.
    package var snapshotRecordForTests: SnapshotRecord { state.withLock { $0.machine.snapshotRecord } }

    /// The room's writer as the messages delivered here say (``ClusterRoomMachine/writer``).
    public var writer: String? { state.withLock { $0.machine.writer } }

    // MARK: The stream

    /// The headers of a room's stream messages that a node reads.
    static let headerKeys = [EngineNames.nodeHeader, EngineNames.kindHeader, EngineNames.incarnationHeader, EngineNames.messageIDHeader,
                             EngineNames.forwardsHeader, EngineNames.sealHeader, EngineNames.sealMarkHeader, EngineNames.followsHeader]

    /// A stream message as the machine takes it, its seal judged.
    private func delivery(_ message: StreamMessage) -> ClusterRoomMachine.Delivery {
        let verdict: EngineTrust.Verdict, follows: UInt64?
        if place.shard != nil {
            // A message with no seal still says what it follows (so its place is checked).
            (verdict, follows) = node.trust.judgeShard(seal: message.headers[EngineNames.sealHeader], subject: subject, life: life,
                                                       headers: message.headers, body: message.data)
        } else {
            verdict = node.trust.judgeStream(seal: message.headers[EngineNames.sealHeader], subject: subject, life: life, seq: message.streamSeq,
                                             headers: message.headers, body: message.data)
            follows = nil
        }
        return ClusterRoomMachine.Delivery(streamSeq: message.streamSeq, kind: message.headers[EngineNames.kindHeader],
                                           writer: message.headers[EngineNames.nodeHeader],
                                           incarnation: message.headers[EngineNames.incarnationHeader],
                                           messageID: message.headers[EngineNames.messageIDHeader],
                                           forwards: message.headers[EngineNames.forwardsHeader], data: message.data,
                                           verdict: verdict, sealMark: message.headers[EngineNames.sealMarkHeader] != nil,
                                           lifeMark: message.headers[EngineNames.sealMarkHeader] == EngineNames.lifeMarkValue, follows: follows)
    }

    private func received(_ message: StreamMessage) {
        let delivery = delivery(message)
        if delivery.verdict.isNodeSeal, let seal = message.headers[EngineNames.sealHeader],
           node.trust.isOtherKey(seal), state.withLock({ $0.machine.loading }) {
            readOtherKey.withLock { $0 = true }
        }
        step { $0.delivered(delivery, now: DispatchTime.now().uptimeNanoseconds) }
    }

    private func store(_ record: SnapshotRecord) {
        let subject = place.shard == nil ? EngineNames.snapshotSubject(room) : EngineNames.directorySubject(room)
        let client = node.client, log = node.log, room = room, trust = node.trust
        DispatchQueue.global().async {
            let body = record.bytes
            if case let .failed(why) = client.publish(subject: subject, data: body, headers: [(EngineNames.sealHeader, trust.sealSnapshot(subject: subject, body: body))]) {
                log("room '\(room)': could not store a snapshot: \(why)")
            }
        }
    }
}

extension Duration {
    /// The same length for Dispatch.
    var dispatch: DispatchTimeInterval {
        let (seconds, attoseconds) = components
        return .nanoseconds(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000))
    }
}

/// A callback kept behind a lock. A class, not the closure itself: a closure in a
/// `Locked` state is re-wrapped (reabstracted) by every `inout` access that reads it, and
/// one read per delivered message grew a chain of wrappers without end.
final class Handler: Sendable {
    let run: @Sendable () -> Void
    init(_ run: @escaping @Sendable () -> Void) { self.run = run }
}
