import Coordinator
import Dispatch
import Foundation
import JetStream
import Locking

/// One room of a cluster node: its ``Durability`` (batches appended to the room's stream
/// with a compare-and-set on the stream's last sequence) and its view of the stream (an
/// ordered consumer that folds every stored batch, this node's and the others').
///
/// Every decision is ``ClusterRoomMachine``'s (where a batch lands, what an answer of the
/// engine means, what a delivered message changes, when the consumer is stalled): this
/// class feeds it the engine's answers, the consumer's messages and the timers, and
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
    private let state: Locked<Shell>
    /// Sends publications in the order the machine asks for them (their answers come back
    /// on libnats' thread).
    private let publishing: DispatchQueue
    private let caughtUp = DispatchSemaphore(value: 0)
    private let subscription = Locked<OrderedSubscription?>(nil)
    /// Runs the consumer's watch while stored batches wait for it.
    private let watchdog: DispatchQueue
    /// Told (on the engine's thread) when another node's batches arrived.
    private let foreign = Locked<Handler?>(nil)
    /// While loading: something read was sealed with a key other than the one this node
    /// seals with (a key being rotated out), so the room gets a snapshot of this key.
    private let readOtherKey = Locked(false)

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

    init(node: ClusterNode, room: RoomID, resumeWindow: Int, attempts: Int) throws(ClusterNode.Failure) {
        self.node = node
        self.room = room
        self.resumeWindow = resumeWindow
        stream = EngineNames.stream(room)
        subject = EngineNames.subject(room)
        publishing = DispatchQueue(label: "tabd.cluster.\(room)")
        watchdog = DispatchQueue(label: "tabd.cluster.\(room).watch")
        let client = node.client
        var info: StreamInfo
        var start: StoredState
        var owners: [ClientID: String] = [:]
        var incarnations: [String: String] = [:]
        var from: UInt64
        var sealed = false
        var lifeBound = false
        /// Why the room cannot be loaded here, whatever the engine answers next.
        var refused: ClusterNode.Failure?
        /// Loaded from an unsealed snapshot or first message (phase one of the move to seals).
        var unsealedStart = false
        let trust = node.trust
        let snapshotSubject = EngineNames.snapshotSubject(room)
        // A stream being created or electing a leader answers errors for a moment: the
        // reads are tried again, `attempts` times in all (ClusterNode.loadAttempts: about 15 s).
        var attempt = 0
        while true {
        attempt += 1
        do {
            guard let i = try client.streamInfo(stream) else { throw ClusterNode.Failure("no room '\(room)'") }
            info = i
            var snapshot: SnapshotRecord?
            var snapshotVerdict = EngineTrust.Verdict.sealed
            if let message = try client.lastMessage(stream: EngineNames.snapshots, subject: snapshotSubject, headerKeys: [EngineNames.sealHeader]),
               !message.data.isEmpty {
                snapshotVerdict = trust.judgeSnapshot(seal: message.headers[EngineNames.sealHeader], subject: snapshotSubject, body: message.data)
                switch snapshotVerdict {
                case .sealed:
                    snapshot = try? SnapshotRecord(bytes: message.data)
                    if let seal = message.headers[EngineNames.sealHeader], trust.secret.keyID(of: seal) != trust.secret.sealingKeyID {
                        readOtherKey.withLock { $0 = true }
                    }
                case .unsigned where trust.acceptUnsigned: snapshot = try? SnapshotRecord(bytes: message.data)
                case .unsigned, .forged, .sealedUnbound:
                    node.rejected("snapshot", "room '\(room)': its snapshot \(snapshotVerdict == .forged ? "has a seal that does not open" : "is not sealed"); loaded from its stream instead")
                }
            }
            if let record = snapshot, record.fits(info) {
                start = record.state
                owners = record.owners
                incarnations = record.incarnations
                from = record.streamSeq
                sealed = record.sealed && snapshotVerdict == .sealed
                lifeBound = record.lifeBound && snapshotVerdict == .sealed
                unsealedStart = snapshotVerdict != .sealed
            } else {
                let keys = [EngineNames.sealHeader, EngineNames.kindHeader, EngineNames.nodeHeader, EngineNames.incarnationHeader,
                            EngineNames.messageIDHeader, EngineNames.forwardsHeader, EngineNames.sealMarkHeader]
                guard let first = try client.message(stream: stream, seq: 1, headerKeys: keys), let genesis = try? Genesis(bytes: first.data) else {
                    throw ClusterNode.Failure("room '\(room)' has neither a snapshot nor its first message")
                }
                switch trust.judgeStream(seal: first.headers[EngineNames.sealHeader], subject: subject, life: genesis.epoch, seq: 1,
                                         headers: first.headers, body: first.data) {
                case let verdict where verdict.isNodeSeal:
                    sealed = first.headers[EngineNames.sealMarkHeader] != nil
                    lifeBound = verdict == .sealed && first.headers[EngineNames.sealMarkHeader] == EngineNames.lifeMarkValue
                    if let seal = first.headers[EngineNames.sealHeader], trust.secret.keyID(of: seal) != trust.secret.sealingKeyID {
                        readOtherKey.withLock { $0 = true }
                    }
                case .unsigned where trust.acceptUnsigned:
                    unsealedStart = true
                case .unsigned:
                    node.rejected("batch", "room '\(room)': its first message is not sealed, and it has no sealed snapshot")
                    refused = ClusterNode.Failure("room '\(room)' holds nothing sealed to load from: open it once on a node started with --cluster-unsigned accept (docs/CLUSTER.md)")
                default:
                    node.rejected("batch", "room '\(room)': its first message has a seal that does not open")
                    refused = ClusterNode.Failure("room '\(room)': its first message has a seal that does not open (another cluster secret?)")
                }
                do { start = try StoredState.genesis(tabs: genesis.tabs, epoch: genesis.epoch) } catch {
                    throw ClusterNode.Failure("room '\(room)': \(error.message)")
                }
                from = 1
            }
            break
        } catch {
            if attempt >= attempts {
                throw ClusterNode.Failure((error as? ClusterNode.Failure)?.description ?? "cannot load room '\(room)': \(error)", mayPass: true)
            }
            let (seconds, attoseconds) = ClusterNode.loadPause(after: attempt).components
            Thread.sleep(forTimeInterval: Double(seconds) + Double(attoseconds) / 1e18)
        }
        }
        if let refused { throw refused }
        streamCreated = info.created
        life = start.epoch
        let machine = ClusterRoomMachine(room: room, start: start, owners: owners, incarnations: incarnations, from: from, streamEnd: info.lastSeq,
                                         streamCreated: info.created, resumeWindow: resumeWindow,
                                         messageIDPrefix: "\(node.name)-\(room)-\(String(UInt64.random(in: 0...UInt64.max), radix: 36))",
                                         sealed: sealed, lifeBound: lifeBound)
        state = Locked(Shell(machine: machine))
        if !machine.loading { caughtUp.signal() }
        do {
            let sub = try follow(from: from + 1)
            subscription.withLock { $0 = sub }
        } catch { throw ClusterNode.Failure("cannot follow room '\(room)': \(error)") }
        if caughtUp.wait(timeout: .now() + 30) == .timedOut {
            close()
            throw ClusterNode.Failure("room '\(room)': the engine did not deliver its batches within 30 s")
        }
        if let broken = state.withLock({ $0.machine.broken }) { close(); throw ClusterNode.Failure(broken) }
        if trust.sealsLives(), !state.withLock({ $0.machine.lifeBound }) { markLife() }
        // A room loaded from an unsealed start (phase one of the move to seals), or whose
        // history read holds messages of another key (one being rotated out), gets a
        // snapshot sealed with this node's key: nodes load it from there on, without them.
        if unsealedStart || readOtherKey.withLock({ $0 }) { store(state.withLock { $0.machine.snapshotRecord }) }
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
                while DispatchTime.now().uptimeNanoseconds < deadline {
                    if state.withLock({ $0.machine.lifeBound || $0.machine.broken != nil }) {
                        node.log("room '\(room)': marked bound to its life; every later message of it must be sealed so")
                        return
                    }
                    Thread.sleep(forTimeInterval: 0.01)
                }
                break
            }
            if attempt % 10 == 0 { node.log("room '\(room)': cannot mark it bound to its life yet; trying again") }
            Thread.sleep(forTimeInterval: 0.3)
        }
        node.log("room '\(room)': could not mark it bound to its life; its messages sealed without it are still taken until a node does")
    }

    /// Called with every later batch of other nodes (on the engine's thread; quick).
    public func onForeignBatches(_ handler: @escaping @Sendable () -> Void) {
        foreign.withLock { $0 = Handler(handler) }
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
            case let .refollow(from):
                // A round trip to the engine: not on whichever thread performs (it may be
                // the consumer's own).
                watchdog.async { [weak self] in self?.refollow(from: from) }
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
        let bound = node.trust.sealsLives(roomBound: state.withLock { $0.machine.lifeBound })
        headers.append((EngineNames.sealHeader, node.trust.sealStream(subject: subject, life: life, bound: bound, kind: nil,
                                                                      follows: publication.expectedLastSeq, node: node.name,
                                                                      incarnation: node.incarnation, messageID: publication.messageID,
                                                                      forwards: publication.forwardsHeader, sealMark: nil, body: body)))
        node.client.publishAsync(subject: subject, data: body, headers: headers,
                                 expectedLastSeq: publication.expectedLastSeq, expectedLastMessageID: publication.expectedLastMessageID,
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
                let found = try self.node.client.message(stream: self.stream, seq: seq, headerKeys: Self.headerKeys)
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

    /// Whether the room's stream is still the one this room was loaded from: false once
    /// the room was deleted (and perhaps created again) elsewhere.
    public func streamIsCurrent() throws(ClusterNode.Failure) -> Bool {
        do { return try node.client.streamInfo(stream)?.created == streamCreated } catch {
            throw ClusterNode.Failure("cannot read room '\(room)': \(error)")
        }
    }

    /// Stops following the stream; every wait fails.
    public func close() {
        subscription.withLock { $0 }?.cancel()
        foreign.withLock { $0 = nil }
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
        append(batch, generation: generation, forwardID: nil, done: done)
    }

    public func append(_ batch: EventBatch, generation: Int, forwardID: String, done: @escaping @Sendable (CommandError?) -> Void) {
        append(batch, generation: generation, forwardID: Optional(forwardID), done: done)
    }

    private func append(_ batch: EventBatch, generation: Int, forwardID: String?, done: @escaping @Sendable (CommandError?) -> Void) {
        state.withLock { s in
            let waiter = s.nextWaiter
            s.nextWaiter += 1
            s.waiters[waiter] = done
            s.outbox += s.machine.append(batch, generation: generation, waiter: waiter, forwardID: forwardID)
        }
        performInOrder()
    }

    public func storedForward(_ forwardID: String) -> ForwardRecord? { state.withLock { $0.machine.storedForward(forwardID) } }

    public func fence(after seq: Int, record: ForwardRecord, generation: Int, forwardID: String,
                      done: @escaping @Sendable (CommandError?) -> Void) {
        // The test-only switch that shows the fault rounds' checker catching what fences prevent.
        if Self.fencesOff { return done(nil) }
        state.withLock { s in
            let waiter = s.nextWaiter
            s.nextWaiter += 1
            s.waiters[waiter] = done
            s.outbox += s.machine.fence(.init(after: seq, id: forwardID, record: record), generation: generation, waiter: waiter)
        }
        performInOrder()
    }

    /// `TABD_TEST_NO_FENCE=1`: a forwarded command that changes nothing is answered without
    /// its fence, as before fences, so that two nodes can decide it (a test shows the
    /// fault rounds' checker catching that). Never for a real cluster.
    static let fencesOff = ProcessInfo.processInfo.environment["TABD_TEST_NO_FENCE"] == "1"

    public func published(through seq: Int) { state.withLock { $0.machine.published(through: seq) } }

    /// The room's writer as the messages delivered here say (``ClusterRoomMachine/writer``).
    public var writer: String? { state.withLock { $0.machine.writer } }

    // MARK: The stream

    /// The headers of a room's stream messages that a node reads.
    static let headerKeys = [EngineNames.nodeHeader, EngineNames.kindHeader, EngineNames.incarnationHeader, EngineNames.messageIDHeader,
                             EngineNames.forwardsHeader, EngineNames.sealHeader, EngineNames.sealMarkHeader]

    /// A stream message as the machine takes it, its seal judged.
    private func delivery(_ message: StreamMessage) -> ClusterRoomMachine.Delivery {
        let verdict = node.trust.judgeStream(seal: message.headers[EngineNames.sealHeader], subject: subject, life: life, seq: message.streamSeq,
                                             headers: message.headers, body: message.data)
        return ClusterRoomMachine.Delivery(streamSeq: message.streamSeq, kind: message.headers[EngineNames.kindHeader],
                                           writer: message.headers[EngineNames.nodeHeader],
                                           incarnation: message.headers[EngineNames.incarnationHeader],
                                           messageID: message.headers[EngineNames.messageIDHeader],
                                           forwards: message.headers[EngineNames.forwardsHeader], data: message.data,
                                           verdict: verdict, sealMark: message.headers[EngineNames.sealMarkHeader] != nil,
                                           lifeMark: message.headers[EngineNames.sealMarkHeader] == EngineNames.lifeMarkValue)
    }

    private func received(_ message: StreamMessage) {
        let delivery = delivery(message)
        if delivery.verdict.isNodeSeal, let seal = message.headers[EngineNames.sealHeader],
           node.trust.secret.keyID(of: seal) != node.trust.secret.sealingKeyID, state.withLock({ $0.machine.loading }) {
            readOtherKey.withLock { $0 = true }
        }
        step { $0.delivered(delivery, now: DispatchTime.now().uptimeNanoseconds) }
    }

    private func store(_ record: SnapshotRecord) {
        let client = node.client, subject = EngineNames.snapshotSubject(room), log = node.log, room = room, trust = node.trust
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
