import Coordinator
import Dispatch
import Foundation
import JetStream
import Locking

/// One room of a cluster node: its ``Durability`` (batches appended to the room's stream
/// with a compare-and-set on the stream's last sequence) and its view of the stream (an
/// ordered consumer that folds every stored batch, this node's and the others').
///
/// A batch is reported committed only once the consumer delivers it: a node broadcasts
/// nothing the engine has not stored. A publish that finds another batch at its place is
/// reported as a conflict once the consumer has delivered that other batch, so the
/// coordinator rolls back to a state that includes it and decides its commands again.
/// A publish without an answer (timeout, reconnect) is sent again with the same message
/// id and expected sequence until the engine says what became of it: nothing is answered
/// while its fate is unknown.
public final class ClusterRoom: Durability, Sendable {
    public let room: RoomID
    let node: ClusterNode
    let stream: String
    let subject: String
    let resumeWindow: Int
    /// The stream's creation time: snapshots name it, so none outlives its incarnation.
    let streamCreated: Int64
    private let state: Locked<State>
    private let publishing: DispatchQueue
    private let caughtUp = DispatchSemaphore(value: 0)
    private let subscription = Locked<EngineSubscription?>(nil)
    /// Watches the consumer while stored batches wait for it; replaces a lost consumer.
    private let watchdog: DispatchQueue
    /// A node stores a snapshot when one of its own batches is delivered this many stream
    /// messages after the last snapshot it loaded or stored (every node that writes does,
    /// so the engine has one at most about this far behind the stream's end).
    static let snapshotDistance: UInt64 = 1000
    /// How long the consumer may deliver nothing while a stored batch waits.
    static let stallNanoseconds: UInt64 = 500_000_000
    /// Told (on the engine's thread) when another node's batches arrived.
    private let foreign = Locked<(@Sendable () -> Void)?>(nil)

    private struct Pending {
        let batch: EventBatch
        let generation: Int
        let done: @Sendable (CommandError?) -> Void
    }

    private struct State {
        var stored: StoredState
        /// The last stream sequence the consumer delivered.
        var delivered: UInt64
        /// Who owns each client (the node whose presence batch joined it).
        var owners: [ClientID: String]
        /// Loading: the stream's last sequence to reach before the room is served.
        var target: UInt64
        var loading = true
        var queue: [Pending] = []
        var draining = false
        /// The stream sequence of the message that ends at each room seq (delivered, or
        /// published by this node): a batch is published expecting the stream to end where
        /// the state it was decided on ends, so it lands only on that state.
        var streamSeqOf: [Int: UInt64] = [:]
        var generation = 0
        /// Set after a failure: every batch of the failed generation fails alike, reported
        /// once the consumer has delivered past `failureAfter` (what won a conflict, and
        /// every batch of this node already stored), so the state rolled back to has them.
        var failure: CommandError?
        var failureAfter: UInt64 = 0
        /// Set by close(): nothing more is published.
        var closed = false
        /// Published, reported once the consumer delivers them.
        var awaiting: [UInt64: @Sendable (CommandError?) -> Void] = [:]
        /// Conflicts, reported once the consumer has delivered past `after`.
        var conflicts: [(after: UInt64, done: @Sendable (CommandError?) -> Void)] = []
        /// The stream position of the last snapshot this node loaded or stored.
        var snapshotSeq: UInt64 = 0
        var published = 0
        var broken: String?
        /// Publishes another node's batch got ahead of.
        var conflictCount = 0
        /// When the consumer last delivered (uptime ns), and whether a watch is scheduled
        /// while stored batches wait for it (see ``checkDelivery()``).
        var lastDelivery: UInt64 = 0
        var watching = false
    }

    init(node: ClusterNode, room: RoomID, resumeWindow: Int) throws(ClusterNode.Failure) {
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
        var from: UInt64
        // A stream being created or electing a leader answers errors for a moment: the
        // reads are tried again for up to about 15 s.
        var attempt = 0
        while true {
        attempt += 1
        do {
            guard let i = try client.streamInfo(stream) else { throw ClusterNode.Failure("no room '\(room)'") }
            info = i
            if let message = try client.lastMessage(stream: EngineNames.snapshots, subject: EngineNames.snapshotSubject(room)),
               !message.data.isEmpty, let record = try? SnapshotRecord(bytes: message.data), record.fits(info) {
                start = record.state
                owners = record.owners
                from = record.streamSeq
            } else {
                guard let first = try client.message(stream: stream, seq: 1), let genesis = try? Genesis(bytes: first.data) else {
                    throw ClusterNode.Failure("room '\(room)' has neither a snapshot nor its first message")
                }
                let origin: Snapshot
                do { origin = try Coordinator.origin(tabs: genesis.tabs) } catch { throw ClusterNode.Failure("room '\(room)': \(error.message)") }
                start = StoredState(epoch: genesis.epoch, snapshot: origin, nextPage: genesis.tabs.count + 1, nextClient: 1, history: [])
                from = 1
            }
            break
        } catch {
            if attempt >= 60 {
                throw (error as? ClusterNode.Failure) ?? ClusterNode.Failure("cannot load room '\(room)': \(error)")
            }
            Thread.sleep(forTimeInterval: min(0.02 * Double(attempt), 0.3))
        }
        }
        streamCreated = info.created
        state = Locked(State(stored: start, delivered: from, owners: owners, target: info.lastSeq,
                             streamSeqOf: [start.snapshot.seq: from], snapshotSeq: from))
        if info.lastSeq <= from { state.withLock { $0.loading = false }; caughtUp.signal() }
        do {
            let sub = try follow(from: from + 1)
            subscription.withLock { $0 = sub }
        } catch { throw ClusterNode.Failure("cannot follow room '\(room)': \(error)") }
        if caughtUp.wait(timeout: .now() + 30) == .timedOut {
            close()
            throw ClusterNode.Failure("room '\(room)': the engine did not deliver its batches within 30 s")
        }
        if let broken = state.withLock({ $0.broken }) { close(); throw ClusterNode.Failure(broken) }
    }

    /// Makes message ids unique to this incarnation (the engine deduplicates by id).
    private let nonce = String(UInt64.random(in: 0...UInt64.max), radix: 36)

    /// Called with every later batch of other nodes (on the engine's thread; quick).
    public func onForeignBatches(_ handler: @escaping @Sendable () -> Void) {
        foreign.withLock { $0 = handler }
    }

    /// An ordered consumer of the room's stream from `seq` on, feeding ``received(_:)``.
    private func follow(from seq: UInt64) throws(EngineError) -> EngineSubscription {
        try node.client.subscribeOrdered(stream: stream, subject: subject, startSeq: seq,
                                         headerKeys: [EngineNames.nodeHeader, EngineNames.kindHeader]) { [weak self] message in
            self?.received(message)
        }
    }

    /// Called when the engine stored a batch the consumer has not delivered yet: makes
    /// sure a watch runs until every stored batch is delivered.
    private func watchDelivery() {
        let start = state.withLock { s -> Bool in
            guard !s.watching else { return false }
            s.watching = true
            s.lastDelivery = max(s.lastDelivery, DispatchTime.now().uptimeNanoseconds)
            return true
        }
        if start { watchdog.asyncAfter(deadline: .now() + .nanoseconds(Int(Self.stallNanoseconds))) { [weak self] in self?.checkDelivery() } }
    }

    /// The consumer lives on one server. When that server dies (a stream leader killed),
    /// libnats learns it only from missing heartbeats, seconds later; meanwhile the
    /// engine stores this node's batches and no command is answered. So while stored
    /// batches wait and nothing at all has been delivered for ``stallNanoseconds``, the
    /// consumer is replaced by a new one from the next undelivered seq. Messages both
    /// deliver are taken once (``received(_:)`` skips what it has seen).
    private func checkDelivery() {
        let now = DispatchTime.now().uptimeNanoseconds
        let next = state.withLock { s -> (from: UInt64?, again: Bool) in
            guard !s.closed, s.broken == nil, !s.awaiting.isEmpty else { s.watching = false; return (nil, false) }
            if now &- s.lastDelivery < Self.stallNanoseconds { return (nil, true) }
            return (s.delivered + 1, true)
        }
        if let from = next.from {
            node.log("room '\(room)': nothing delivered for \(Self.stallNanoseconds / 1_000_000) ms while batches wait; following the stream again from \(from)")
            if let sub = try? follow(from: from) {
                node.stats.refollowed()
                let old = subscription.withLock { current -> EngineSubscription? in
                    defer { current = sub }
                    return current
                }
                state.withLock { $0.lastDelivery = DispatchTime.now().uptimeNanoseconds }
                // Unsubscribing asks the engine to delete the old consumer, which may wait
                // out a timeout on a dead server: not on this queue.
                if let old { DispatchQueue.global().async { old.cancel() } }
                // close() may have run in between: it cancelled the old one, not this one.
                if state.withLock({ $0.closed }) { sub.cancel() }
            }
        }
        if next.again {
            watchdog.asyncAfter(deadline: .now() + .nanoseconds(Int(Self.stallNanoseconds) / 2)) { [weak self] in self?.checkDelivery() }
        }
    }

    /// Whether the room's stream is still the one this room was loaded from: false once
    /// the room was deleted (and perhaps created again) elsewhere.
    public func streamIsCurrent() throws(ClusterNode.Failure) -> Bool {
        do { return try node.client.streamInfo(stream)?.created == streamCreated } catch {
            throw ClusterNode.Failure("cannot read room '\(room)': \(error)")
        }
    }

    /// Stops following the stream.
    public func close() {
        subscription.withLock { $0 }?.cancel()
        foreign.withLock { $0 = nil }
        let left = state.withLock { s -> [@Sendable (CommandError?) -> Void] in
            s.closed = true
            defer { s.queue = []; s.awaiting = [:]; s.conflicts = [] }
            return s.queue.map(\.done) + Array(s.awaiting.values) + s.conflicts.map(\.done)
        }
        for done in left { done(.unavailable("room '\(room)' closed")) }
    }

    /// In the lock: whether `done` gets the generation's failure now; if not, it is kept
    /// until the consumer has delivered past `failureAfter`.
    private static func reportNow(_ s: inout State, _ done: @escaping @Sendable (CommandError?) -> Void) -> Bool {
        if s.closed || s.delivered > s.failureAfter { return true }
        s.conflicts.append((s.failureAfter, done))
        return false
    }

    public var isSharedLog: Bool { true }

    /// The clients whose node is dead (or is this node in an earlier life, when
    /// `includingOwn`): they left without anyone saying so.
    public func orphans(includingOwn: Bool) -> Set<ClientID> {
        state.withLock { s in
            Set(s.stored.snapshot.clients.map(\.id).filter { id in
                guard let owner = s.owners[id] else { return includingOwn }
                return owner == node.name ? includingOwn : !node.isAlive(owner)
            })
        }
    }

    /// How many of this node's batches found another node's batch at their place.
    public var conflicts: Int { state.withLock { $0.conflictCount } }

    /// Why the room stopped working (a batch in the stream that does not fold), if it did.
    public var broken: String? { state.withLock { $0.broken } }

    // MARK: Durability

    public func committedState() -> StoredState { state.withLock { $0.stored } }

    public func reset(generation: Int) {
        state.withLock { s in
            s.generation = generation
            s.failure = nil
        }
    }

    public func append(_ batch: EventBatch, generation: Int, done: @escaping @Sendable (CommandError?) -> Void) {
        let (start, failure) = state.withLock { s -> (Bool, CommandError?) in
            if s.closed { return (false, .unavailable("room '\(room)' closed")) }
            if generation < s.generation { return (false, .unavailable("rolled back")) }
            if let failure = s.failure { return Self.reportNow(&s, done) ? (false, failure) : (false, nil) }
            s.queue.append(Pending(batch: batch, generation: generation, done: done))
            guard !s.draining else { return (false, nil) }
            s.draining = true
            return (true, nil)
        }
        if let failure { return done(failure) }
        if start { publishing.async { self.drain() } }
    }

    /// Publishes the queued batches one after the other, each expecting the stream's
    /// last sequence to be the one before it.
    private func drain() {
        while true {
            let next = state.withLock { s -> (Pending, UInt64?, Int)? in
                guard !s.queue.isEmpty else { s.draining = false; return nil }
                s.published += 1
                let pending = s.queue.removeFirst()
                return (pending, s.streamSeqOf[pending.batch.firstSeq - 1], s.published)
            }
            guard let (pending, base, n) = next else { return }
            let (failure, skip) = state.withLock { s -> (CommandError?, Bool) in
                if s.closed { return (.unavailable("room '\(room)' closed"), false) }
                if let failure = s.failure { return Self.reportNow(&s, pending.done) ? (failure, false) : (nil, true) }
                return (pending.generation < s.generation ? .unavailable("rolled back") : nil, false)
            }
            if skip { continue }
            if let failure { pending.done(failure); continue }
            guard let expected = base else {
                // Decided on a state this node cannot place in the stream (should not happen:
                // every base is a delivered or published batch).
                failAll(first: pending, error: .unavailable("the batch's place in the stream is unknown"), after: nil)
                continue
            }
            let id = "\(node.name)-\(room)-\(nonce)-\(n)"
            var attempt = 0
            while true {
                let sent = DispatchTime.now().uptimeNanoseconds
                let result = node.client.publish(subject: subject, data: pending.batch.frameBytes,
                                                 headers: [(EngineNames.nodeHeader, node.name)], expectedLastSeq: expected, msgID: id)
                node.stats.published(seconds: Double(DispatchTime.now().uptimeNanoseconds - sent) / 1e9)
                if attempt > 0 { node.stats.retried() }
                switch result {
                case let .stored(seq, _):
                    let now = state.withLock { s -> Bool in
                        s.streamSeqOf[pending.batch.lastSeq] = seq
                        if s.delivered >= seq { return true }
                        s.awaiting[seq] = pending.done
                        return false
                    }
                    if now { pending.done(nil) } else { watchDelivery() }
                case .wrongLastSequence:
                    state.withLock { $0.conflictCount += 1 }
                    node.stats.conflict()
                    failAll(first: pending, error: .conflict(), after: expected)
                case let .unknown(why):
                    attempt += 1
                    if state.withLock({ $0.closed }) { pending.done(.unavailable("room '\(room)' closed")); break }
                    if attempt == 1 || attempt % 20 == 0 { node.log("room '\(room)': no answer from the engine for a batch (\(why)); asking again") }
                    Thread.sleep(forTimeInterval: min(0.05 * Double(attempt), 0.25)) // elections answer "no responders" at once
                    continue
                case let .failed(why):
                    // Not stored (an election, the engine busy): the same publish is tried
                    // again for a while before the command is answered `unavailable`.
                    attempt += 1
                    if attempt < 300 {
                        if attempt == 1 || attempt % 20 == 0 { node.log("room '\(room)': the engine refused a batch (\(why)); trying again") }
                        Thread.sleep(forTimeInterval: min(0.05 * Double(attempt), 0.5))
                        continue
                    }
                    failAll(first: pending, error: .unavailable("the engine refused the batch: \(why)"), after: nil)
                }
                break
            }
        }
    }

    /// Fails `first` and every queued batch: a conflict once the consumer has delivered
    /// what took its place (so the state rolled back to includes it), another failure now.
    private func failAll(first: Pending, error: CommandError, after: UInt64?) {
        let now = state.withLock { s -> [Pending] in
            s.failure = error
            // Past what took this batch's place, and past every batch of this node stored
            // but not delivered yet: the rollback must see them all.
            var past = after ?? (s.delivered > 0 ? s.delivered - 1 : 0)
            if let stored = s.awaiting.keys.max(), stored > 0 { past = max(past, stored - 1) }
            s.failureAfter = past
            let all = [first] + s.queue
            s.queue = []
            return all.filter { Self.reportNow(&s, $0.done) }
        }
        for p in now { p.done(error) }
    }

    // MARK: The stream

    private func received(_ message: StreamMessage) {
        var reports: [(@Sendable (CommandError?) -> Void, CommandError?)] = []
        var others = false
        var snapshot: SnapshotRecord?
        var finishedLoading = false
        state.withLock { s in
            guard message.streamSeq > s.delivered, s.broken == nil else { return } // seen already
            s.lastDelivery = DispatchTime.now().uptimeNanoseconds
            if message.headers[EngineNames.kindHeader] == "genesis" {
                s.delivered = message.streamSeq
            } else {
                guard case let .events(batch)? = try? ServerFrame(bytes: message.data) else {
                    s.broken = "room '\(room)': stream message \(message.streamSeq) is not a batch"
                    return
                }
                do { try s.stored.apply(batch) } catch {
                    s.broken = "room '\(room)': stream message \(message.streamSeq) does not fold: \(error)"
                    return
                }
                s.delivered = message.streamSeq
                s.streamSeqOf[batch.lastSeq] = message.streamSeq
                if s.streamSeqOf.count > 4096 { s.streamSeqOf = s.streamSeqOf.filter { $0.key >= batch.lastSeq - 1024 } }
                s.stored.history.append(batch)
                trim(&s.stored.history)
                let owner = message.headers[EngineNames.nodeHeader] ?? ""
                for e in batch.events {
                    switch e.event {
                    case let .clientJoined(c): s.owners[c.id] = owner
                    case let .clientLeft(id): s.owners[id] = nil
                    default: break
                    }
                }
                if let done = s.awaiting.removeValue(forKey: message.streamSeq) {
                    reports.append((done, nil))
                    // By stream distance, whoever wrote the batches in between: a room stays
                    // loadable from a snapshot and the kept tail however its writers come and go.
                    if s.delivered - s.snapshotSeq >= Self.snapshotDistance {
                        s.snapshotSeq = s.delivered
                        snapshot = SnapshotRecord(streamCreated: streamCreated, streamSeq: s.delivered, state: s.stored, owners: s.owners)
                    }
                } else if !s.loading {
                    others = true
                }
            }
            if !s.conflicts.isEmpty {
                let ready = s.conflicts.filter { s.delivered > $0.after }
                s.conflicts.removeAll { s.delivered > $0.after }
                reports += ready.map { ($0.done, .conflict()) }
            }
            if s.loading, s.delivered >= s.target {
                s.loading = false
                finishedLoading = true
            }
        }
        if finishedLoading { caughtUp.signal() }
        for (done, error) in reports { done(error) }
        if others { foreign.withLock { $0 }?() }
        if let snapshot { store(snapshot) }
        if let broken = state.withLock({ $0.broken }) {
            node.log(broken)
            // Nothing waits for a stream that no longer folds: every wait fails.
            let (left, loading) = state.withLock { s -> ([@Sendable (CommandError?) -> Void], Bool) in
                s.closed = true
                defer { s.queue = []; s.awaiting = [:]; s.conflicts = [] }
                return (s.queue.map(\.done) + Array(s.awaiting.values) + s.conflicts.map(\.done), s.loading)
            }
            for done in left { done(.unavailable(broken)) }
            if loading { caughtUp.signal() }
        }
    }

    /// Keeps the batches of the last `resumeWindow` events (for `resume` on this node),
    /// and never fewer than 10,000: the coordinator takes other nodes' batches from here.
    private func trim(_ history: inout [EventBatch]) {
        guard let last = history.last else { return }
        let floor = last.lastSeq - max(resumeWindow, 10_000)
        if let first = history.first, first.firstSeq <= floor {
            history.removeAll { $0.lastSeq <= floor }
        }
    }

    private func store(_ record: SnapshotRecord) {
        let client = node.client, subject = EngineNames.snapshotSubject(room), log = node.log, room = room
        DispatchQueue.global().async {
            if case let .failed(why) = client.publish(subject: subject, data: record.bytes) {
                log("room '\(room)': could not store a snapshot: \(why)")
            }
        }
    }
}
