import Coordinator

/// Every decision of a cluster room, as a value: which batch to publish and where in the
/// stream it must land, what an answer of the engine means (stored, a conflict, no
/// answer, refused), what a delivered message changes (the fold, whose clients are whose,
/// which waits it ends), when the consumer is stalled, and what closing fails. It takes
/// inputs and returns ``Action``s; ``ClusterRoom`` performs them (the engine's calls,
/// timers, callbacks) and does nothing else. Time comes in as uptime nanoseconds.
///
/// Waits are named by ``Waiter`` numbers the shell hands in with each batch and gets back
/// in ``Action/report(_:_:)``; the machine holds no closure.
///
/// The rules:
/// - A batch is reported committed only once the consumer delivers it.
/// - One publication is in flight at a time, expecting the stream to end at the message
///   that ends the batch's base state (the state it was decided on).
/// - A publication another batch got ahead of (`wrongLastSequence`) fails with a
///   conflict, and so does every later batch of its generation; the failures are reported
///   only once the consumer has delivered past what took its place and past every batch of
///   this node already stored, so the state the coordinator rolls back to holds them all.
/// - A publication without an answer is sent again with the same message id (the engine
///   deduplicates) until the engine says what became of it; a refused one is tried again
///   for a while (an election), then fails `unavailable`.
/// - A message that is not a batch, or does not fold, breaks the room: every wait fails.
package struct ClusterRoomMachine: Sendable {
    package typealias Waiter = UInt64

    /// A batch on its way into the stream.
    package struct Publication: Equatable, Sendable {
        package let waiter: Waiter
        package let batch: EventBatch
        /// The stream sequence the stream must end at for the batch to land.
        package let expectedLastSeq: UInt64
        /// The same for every attempt: the engine stores it once.
        package let messageID: String
        /// How many times it was sent before this attempt.
        package var attempt = 0
    }

    /// What the engine answered a publication.
    package enum PublishOutcome: Equatable, Sendable {
        case stored(seq: UInt64)
        /// Another message is at the expected place.
        case wrongLastSequence
        /// No answer (a timeout, a reconnect): its fate is unknown.
        case unknown(String)
        /// Not stored (an election, the engine busy).
        case failed(String)
    }

    /// A message of the room's stream, as the consumer delivered it.
    package struct Delivery: Sendable {
        package let streamSeq: UInt64
        /// The kind header: `genesis` for the room's first message.
        package let kind: String?
        /// The node that wrote it, and which life of it.
        package let writer: String?
        package let incarnation: String?
        package let data: [UInt8]

        package init(streamSeq: UInt64, kind: String?, writer: String?, incarnation: String? = nil, data: [UInt8]) {
            self.streamSeq = streamSeq; self.kind = kind; self.writer = writer; self.incarnation = incarnation; self.data = data
        }
    }

    package enum Action: Equatable, Sendable {
        /// The wait ends: committed (nil) or failed.
        case report(Waiter, CommandError?)
        /// Send this publication now (one at a time, in order).
        case publish(Publication)
        /// Send it again after this long.
        case publishLater(Publication, after: Duration)
        /// Another node's batches arrived (after loading): the coordinator takes them in.
        case foreignBatches
        /// Store this snapshot of the room in the engine.
        case storeSnapshot(SnapshotRecord)
        /// Check the consumer (``checkDelivery(now:)``) after this long.
        case watch(after: Duration)
        /// Replace the consumer by one from this stream sequence on.
        case refollow(from: UInt64)
        /// The stream is read up to where it ended when the room was opened.
        case caughtUp
        case log(String)
    }

    /// A node stores a snapshot when one of its own batches is delivered this many stream
    /// messages after the last snapshot it loaded or stored (every node that writes does,
    /// so the engine has one at most about this far behind the stream's end).
    package static let snapshotDistance: UInt64 = 1000
    /// How long the consumer may deliver nothing while a stored batch waits.
    package static let stallNanoseconds: UInt64 = 500_000_000
    /// Refused publications are tried this many times before the batch fails.
    package static let refusedAttempts = 300

    private struct Queued: Sendable {
        let batch: EventBatch
        let generation: Int
        let waiter: Waiter
    }

    package let room: RoomID
    /// Message ids are this and a counter: unique to this node, room and incarnation.
    package let messageIDPrefix: String
    /// Events kept in the history, and never fewer than 10,000: the coordinator takes
    /// other nodes' batches from there.
    package let resumeWindow: Int
    /// The stream's creation time: snapshots name it, so none outlives its incarnation.
    package let streamCreated: Int64

    /// The state at the last delivered batch, its history and counters.
    package private(set) var stored: StoredState
    /// The last stream sequence the consumer delivered.
    package private(set) var delivered: UInt64
    /// The node that joined each listed client: an annotation of the roster, set and
    /// cleared only for presence events the roster's fold (in `stored.apply`) accepted.
    package private(set) var owners: [ClientID: String]
    /// The incarnation of each node's last message (``ClusterNode/incarnation``): a node
    /// heard in another life has lost the clients of this one.
    package private(set) var incarnations: [String: String]
    /// Loading: the stream's last sequence to reach before the room is served.
    private let target: UInt64
    package private(set) var loading: Bool
    private var queue: [Queued] = []
    /// The publication sent and not answered yet.
    private var inFlight: Waiter?
    /// The stream sequence of the message that ends at each room seq (delivered, or
    /// published by this node).
    private var streamSeqOf: [Int: UInt64]
    private var generation = 0
    /// Set after a failure: every batch of the failed generation fails alike, reported
    /// once the consumer has delivered past `failureAfter`.
    private var failure: CommandError?
    private var failureAfter: UInt64 = 0
    package private(set) var closed = false
    /// Stored, reported once the consumer delivers them, by stream sequence.
    private var awaiting: [UInt64: Waiter] = [:]
    /// Failures reported once the consumer has delivered past `after`.
    private var heldFailures: [(after: UInt64, waiter: Waiter, error: CommandError)] = []
    /// The stream position of the last snapshot this node loaded or stored.
    private var snapshotSeq: UInt64
    private var published = 0
    package private(set) var broken: String?
    /// Publications another node's batch got ahead of.
    package private(set) var conflicts = 0
    /// When the consumer last delivered, and whether a watch is scheduled.
    private var lastDelivery: UInt64 = 0
    private var watching = false

    /// A room read from `start` (a snapshot at stream sequence `from`, or the genesis at
    /// 1), whose stream ended at `streamEnd` when it was opened.
    package init(room: RoomID, start: StoredState, owners: [ClientID: String], incarnations: [String: String] = [:],
                 from: UInt64, streamEnd: UInt64, streamCreated: Int64, resumeWindow: Int, messageIDPrefix: String) {
        self.room = room
        self.stored = start
        self.owners = owners
        self.incarnations = incarnations
        self.delivered = from
        self.target = streamEnd
        self.loading = streamEnd > from
        self.streamSeqOf = [start.snapshot.seq: from]
        self.snapshotSeq = from
        self.streamCreated = streamCreated
        self.resumeWindow = resumeWindow
        self.messageIDPrefix = messageIDPrefix
    }

    // MARK: Appending

    /// The coordinator rolled back: batches of older generations fail `rolled back`.
    package mutating func reset(generation: Int) {
        self.generation = generation
        failure = nil
    }

    /// A batch to append, decided in `generation`.
    package mutating func append(_ batch: EventBatch, generation: Int, waiter: Waiter) -> [Action] {
        if closed { return [.report(waiter, closedError)] }
        if generation < self.generation { return [.report(waiter, .unavailable("rolled back"))] }
        if let failure { return fail(waiter, failure) }
        queue.append(Queued(batch: batch, generation: generation, waiter: waiter))
        return inFlight == nil ? advance() : []
    }

    /// The next publication, after reporting what the queue's head says about itself.
    private mutating func advance() -> [Action] {
        var actions: [Action] = []
        while inFlight == nil, !queue.isEmpty {
            let next = queue.removeFirst()
            published += 1
            if let failure { actions += fail(next.waiter, failure); continue }
            if next.generation < generation { actions.append(.report(next.waiter, .unavailable("rolled back"))); continue }
            guard let expected = streamSeqOf[next.batch.firstSeq - 1] else {
                // Decided on a state this node cannot place in the stream (every base is a
                // delivered or published batch, so this is a fault).
                actions += failAll(first: next.waiter, .unavailable("the batch's place in the stream is unknown"), after: nil)
                continue
            }
            inFlight = next.waiter
            actions.append(.publish(Publication(waiter: next.waiter, batch: next.batch, expectedLastSeq: expected,
                                                messageID: "\(messageIDPrefix)-\(published)")))
        }
        return actions
    }

    /// Whether `publication` is still to be sent (not answered, not failed by a close).
    package func isInFlight(_ publication: Publication) -> Bool { inFlight == publication.waiter && !closed }

    /// The engine's answer to `publication`, at `now`. An answer after a close (which
    /// failed the publication's wait already) changes nothing.
    package mutating func published(_ publication: Publication, _ outcome: PublishOutcome, now: UInt64) -> [Action] {
        guard inFlight == publication.waiter else { return [] }
        var again = publication
        again.attempt += 1
        switch outcome {
        case let .stored(seq):
            inFlight = nil
            streamSeqOf[publication.batch.lastSeq] = seq
            var actions: [Action] = []
            if delivered >= seq {
                actions.append(.report(publication.waiter, nil))
            } else {
                awaiting[seq] = publication.waiter
                if !watching {
                    watching = true
                    lastDelivery = max(lastDelivery, now)
                    actions.append(.watch(after: .nanoseconds(Int(Self.stallNanoseconds))))
                }
            }
            return actions + advance()
        case .wrongLastSequence:
            inFlight = nil
            conflicts += 1
            return failAll(first: publication.waiter, .conflict(), after: publication.expectedLastSeq) + advance()
        case let .unknown(why):
            let log: [Action] = again.attempt == 1 || again.attempt % 20 == 0
                ? [.log("room '\(room)': no answer from the engine for a batch (\(why)); asking again")] : []
            // Elections answer "no responders" at once: a short pause between attempts.
            return log + [.publishLater(again, after: .milliseconds(min(50 * again.attempt, 250)))]
        case let .failed(why):
            if again.attempt >= Self.refusedAttempts {
                inFlight = nil
                return failAll(first: publication.waiter, .unavailable("the engine refused the batch: \(why)"), after: nil) + advance()
            }
            let log: [Action] = again.attempt == 1 || again.attempt % 20 == 0
                ? [.log("room '\(room)': the engine refused a batch (\(why)); trying again")] : []
            return log + [.publishLater(again, after: .milliseconds(min(50 * again.attempt, 500)))]
        }
    }

    /// Fails `first` and every queued batch with `error`: a conflict once the consumer has
    /// delivered past `after` (what took the batch's place), and past every batch of this
    /// node stored but not delivered yet; another failure likewise past what is stored.
    private mutating func failAll(first: Waiter, _ error: CommandError, after: UInt64?) -> [Action] {
        failure = error
        var past = after ?? (delivered > 0 ? delivered - 1 : 0)
        if let stored = awaiting.keys.max(), stored > 0 { past = max(past, stored - 1) }
        failureAfter = past
        let all = [first] + queue.map(\.waiter)
        queue = []
        return all.flatMap { fail($0, error) }
    }

    /// `waiter` gets `error` now, or once the consumer has delivered past `failureAfter`.
    private mutating func fail(_ waiter: Waiter, _ error: CommandError) -> [Action] {
        if closed || delivered > failureAfter { return [.report(waiter, error)] }
        heldFailures.append((failureAfter, waiter, error))
        return []
    }

    private var closedError: CommandError { .unavailable("room '\(room)' closed") }

    // MARK: The stream

    /// A message the consumer delivered, at `now`.
    package mutating func delivered(_ message: Delivery, now: UInt64) -> [Action] {
        guard message.streamSeq > delivered, broken == nil else { return [] } // seen already (a refollow)
        lastDelivery = now
        var reports: [Action] = []
        var others = false
        var snapshot: SnapshotRecord?
        if message.kind == "genesis" {
            delivered = message.streamSeq
        } else {
            guard case let .events(batch)? = try? ServerFrame(bytes: message.data) else {
                return breakRoom("room '\(room)': stream message \(message.streamSeq) is not a batch")
            }
            do { try stored.apply(batch) } catch {
                return breakRoom("room '\(room)': stream message \(message.streamSeq) does not fold: \(error)")
            }
            delivered = message.streamSeq
            streamSeqOf[batch.lastSeq] = message.streamSeq
            if streamSeqOf.count > 4096 { streamSeqOf = streamSeqOf.filter { $0.key >= batch.lastSeq - 1024 } }
            stored.history.append(batch)
            trimHistory()
            if let writer = message.writer, let incarnation = message.incarnation { incarnations[writer] = incarnation }
            for e in batch.events {
                switch e.event {
                case let .clientJoined(c): owners[c.id] = message.writer ?? ""
                case let .clientLeft(id): owners[id] = nil
                // The list is gone (counted) or starts again (listed): so are its owners.
                case .presenceCounted, .presenceListed: owners = [:]
                default: break
                }
            }
            if let waiter = awaiting.removeValue(forKey: message.streamSeq) {
                reports.append(.report(waiter, nil))
                // By stream distance, whoever wrote the batches in between: a room stays
                // loadable from a snapshot and the kept tail however its writers come and go.
                if delivered - snapshotSeq >= Self.snapshotDistance {
                    snapshotSeq = delivered
                    snapshot = SnapshotRecord(streamCreated: streamCreated, streamSeq: delivered, state: stored, owners: owners,
                                              incarnations: incarnations)
                }
            } else if !loading {
                others = true
            }
        }
        let ready = heldFailures.filter { delivered > $0.after }
        heldFailures.removeAll { delivered > $0.after }
        reports += ready.map { .report($0.waiter, $0.error) }
        var actions: [Action] = []
        if loading, delivered >= target {
            loading = false
            actions.append(.caughtUp)
        }
        actions += reports
        if others { actions.append(.foreignBatches) }
        if let snapshot { actions.append(.storeSnapshot(snapshot)) }
        return actions
    }

    /// A message that does not fold: nothing waits for a stream that no longer does.
    private mutating func breakRoom(_ why: String) -> [Action] {
        broken = why
        let wasLoading = loading
        loading = false
        return [.log(why)] + failEverything(.unavailable(why)) + (wasLoading ? [.caughtUp] : [])
    }

    /// Keeps the batches of the last `resumeWindow` events, and never fewer than 10,000.
    private mutating func trimHistory() {
        guard let last = stored.history.last else { return }
        let floor = last.lastSeq - max(resumeWindow, 10_000)
        if let first = stored.history.first, first.firstSeq <= floor {
            stored.history.removeAll { $0.lastSeq <= floor }
        }
    }

    // MARK: The consumer's watch

    /// The watch's check at `now`: while stored batches wait and nothing at all has been
    /// delivered for ``stallNanoseconds``, the consumer is replaced (it may live on a
    /// server that died, which libnats learns only seconds later).
    package mutating func checkDelivery(now: UInt64) -> [Action] {
        guard !closed, broken == nil, !awaiting.isEmpty else {
            watching = false
            return []
        }
        let again = Action.watch(after: .nanoseconds(Int(Self.stallNanoseconds / 2)))
        if now &- lastDelivery < Self.stallNanoseconds { return [again] }
        return [
            .log("room '\(room)': nothing delivered for \(Self.stallNanoseconds / 1_000_000) ms while batches wait; following the stream again from \(delivered + 1)"),
            .refollow(from: delivered + 1), again,
        ]
    }

    /// A new consumer follows the stream from `now` on.
    package mutating func refollowed(now: UInt64) { lastDelivery = now }

    // MARK: Closing

    /// Nothing more is published; every wait fails.
    package mutating func close() -> [Action] {
        closed = true
        return failEverything(closedError)
    }

    private mutating func failEverything(_ error: CommandError) -> [Action] {
        closed = true
        var waiters = queue.map(\.waiter)
        if let inFlight { waiters.append(inFlight) }
        waiters += awaiting.values.sorted()
        waiters += heldFailures.map(\.waiter)
        queue = []
        awaiting = [:]
        heldFailures = []
        inFlight = nil
        return waiters.map { .report($0, error) }
    }

    // MARK: Presence

    /// The listed clients whose node is dead by `isAlive` (or is `node` itself in an
    /// earlier life, when `includingOwn`): they left without anyone saying so.
    package func orphans(node: String, includingOwn: Bool, isAlive: (String, String?) -> Bool) -> Set<ClientID> {
        Set(stored.snapshot.clients.map(\.id).filter { id in
            guard let owner = owners[id] else { return includingOwn }
            return owner == node ? includingOwn : !isAlive(owner, incarnations[owner])
        })
    }

    /// In a counted room, the nodes with clients counted whose node is dead by `isAlive`
    /// (or is `node` itself in an earlier life, when `includingOwn`).
    package func deadShares(node: String, includingOwn: Bool, isAlive: (String, String?) -> Bool) -> Set<String> {
        Set((stored.snapshot.nodes ?? [:]).filter { $0.value > 0 && ($0.key == node ? includingOwn : !isAlive($0.key, incarnations[$0.key])) }.keys)
    }

    /// The node a listed client joined on, as the stream says.
    package func owner(of client: ClientID) -> String? { owners[client].flatMap { $0.isEmpty ? nil : $0 } }
}
