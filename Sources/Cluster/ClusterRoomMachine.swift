import Coordinator
import Auth

/// Every decision of a cluster room, as a value: which batches go into which engine
/// message and where in the stream it must land, what an answer of the engine means
/// (stored, a conflict, no answer, refused), what a delivered message changes (the fold,
/// whose clients are whose, which waits it ends), when the consumer is stalled, and what
/// closing fails. It takes inputs and returns ``Action``s; ``ClusterRoom`` performs them
/// (the engine's calls, timers, callbacks) and does nothing else. Time comes in as uptime
/// nanoseconds.
///
/// Waits are named by ``Waiter`` numbers the shell hands in with each batch and gets back
/// in ``Action/report(_:_:)``; the machine holds no closure.
///
/// The rules:
/// - A batch is reported committed only once the consumer delivers it.
/// - **Group commit**: one message carries every batch that queued while the pipeline
///   was full (up to ``maxGroupBytes``), as the state file's writer commits what queued
///   in one transaction. Clients see each batch as its own `events` frame all the same.
/// - **A chain of appends**: up to ``pipelineDepth`` messages are in flight (one by
///   default: ``defaultPipelineDepth`` says why). Each expects
///   the stream to end where the one before it will end (its stream sequence plus one)
///   and names that message's id, so that the engine stores a chain only as a whole
///   prefix, in order, with nothing of another writer's in between.
/// - Answers are taken in chain order. **What stands at a place is the consumer's word**:
///   a link is committed when the consumer delivers it at its place, and fails as a
///   conflict when the consumer delivers another message there (it and every later link
///   and queued batch of its generation, reported once the consumer has also delivered
///   every batch of this node already stored, so the state the coordinator rolls back to
///   holds them all). The engine's "wrong last sequence" does not decide it: around a
///   partition a server that still takes itself for the stream's leader gives it while
///   the leader stores the message, and to a retry it may mean that an earlier attempt
///   stands there. A link so answered is sent again (the same id) until the consumer
///   shows its place, and the consumer is watched meanwhile. A link refused or unanswered
///   while an earlier one was still unsettled is sent again, unchanged, once the earlier
///   one is stored.
/// - The chain's head without an answer is sent again with the same message id (the
///   engine deduplicates: a retry of a stored message is answered with its place) until
///   the engine says what became of it; a refused head is tried again for a while (an
///   election), then fails `unavailable` with everything after it.
/// - **Only what a node sealed is believed** (``EngineTrust``). A message whose seal does
///   not open, or an unsealed one after the room's seal mark (its first message, or a
///   `sealed` message, written by a node that requires seals), is passed over as if it
///   were not there: counted, logged, never folded. Unsealed messages before the mark are
///   the room's history as stored. Every node judges alike, whatever its own settings.
/// - **An ack is not the engine's word**: a message is committed once the consumer
///   delivers it, sealed, with this node's message id, at the place it expected. The
///   engine's answer only says when to stop sending it; an answer that names another
///   place is not believed, and another message delivered at the place makes it a
///   conflict. The next message goes out once the one before it came back.
/// - A message that is not a group of batches, or does not fold, breaks the room: every
///   wait fails.
package struct ClusterRoomMachine: Sendable {
    package typealias Waiter = UInt64

    /// One engine message on its way into the stream: one or more consecutive batches,
    /// and fences between them (or only fences).
    package struct Publication: Equatable, Sendable {
        /// One per batch or fence, in order.
        package let waiters: [Waiter]
        package let batches: [EventBatch]
        /// The room seq the message ends at: its last batch's, or the seq its fences follow.
        package let lastSeq: Int
        /// The stream sequence the stream must end at for the message to land.
        package let expectedLastSeq: UInt64
        /// The id of the message the stream must end with: the chain's previous link,
        /// when one was in flight as this one was made.
        package let expectedLastMessageID: String?
        /// The same for every attempt: the engine stores it once.
        package let messageID: String
        /// How many times it was sent before this attempt.
        package var attempt = 0
        /// The batches that are commands forwarded by other nodes (or decided here in their
        /// stead), by last seq: the id each was forwarded with. Every node learns from the
        /// message's header which forwarded commands are stored, so none is applied twice.
        package var forwards: [Int: String] = [:]
        /// The fences it carries: forwarded commands decided here that changed nothing.
        package var fences: [Fence] = []

        /// The `Tabd-Forwards` header, if the message holds a forwarded command's decision:
        /// `SEQ=ID` for a batch ending at SEQ, and for a fence after SEQ `SEQ/u=ID`
        /// (unchanged) or `SEQ/CODE/MESSAGE=ID` (refused; the message base64url-encoded).
        package var forwardsHeader: String? {
            guard !forwards.isEmpty || !fences.isEmpty else { return nil }
            let entries = forwards.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" } + fences.map(\.headerEntry)
            return entries.joined(separator: ",")
        }

        /// The message's body: each batch's `events` frame, one per line (frames are
        /// compact JSON, which holds no raw line feed). A message of one batch is that
        /// batch's frame.
        package var data: [UInt8] { ClusterRoomMachine.body(batches) }
    }

    /// What the engine answered a publication.
    package enum PublishOutcome: Equatable, Sendable {
        case stored(seq: UInt64)
        /// Another message is at the expected place, or the stream does not end with the
        /// expected message.
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
        /// The message's id (`Nats-Msg-Id`), if it has one.
        package let messageID: String?
        /// The forwarded commands among its batches (``Publication/forwardsHeader``).
        package let forwards: String?
        package let data: [UInt8]
        /// What its seal says (judged by the shell, with the cluster's secret).
        package let verdict: EngineTrust.Verdict
        /// It marks the room sealed: every later message must be sealed.
        package let sealMark: Bool
        /// It marks the room's messages bound to its life: every later message must be
        /// sealed so (a life mark is a seal mark too).
        package let lifeMark: Bool
        /// The room's message it says it follows (its seal covers that), where the stream's
        /// order does not say it: in a shard, a room's messages are not consecutive. Nil when
        /// the seal itself checks the place (a stream of its own) or the message holds at
        /// any place.
        package let follows: UInt64?

        /// Whether `other` is this message: the same place, headers and body (what a
        /// message read back from the stream is compared by).
        package func isSameMessage(as other: Delivery) -> Bool {
            streamSeq == other.streamSeq && kind == other.kind && writer == other.writer && incarnation == other.incarnation
                && messageID == other.messageID && forwards == other.forwards && sealMark == other.sealMark && lifeMark == other.lifeMark
                && follows == other.follows && data == other.data
        }

        package init(streamSeq: UInt64, kind: String?, writer: String?, incarnation: String? = nil, messageID: String? = nil,
                     forwards: String? = nil, data: [UInt8], verdict: EngineTrust.Verdict = .sealed, sealMark: Bool = false,
                     lifeMark: Bool = false, follows: UInt64? = nil) {
            self.streamSeq = streamSeq; self.kind = kind; self.writer = writer; self.incarnation = incarnation
            self.messageID = messageID; self.forwards = forwards; self.data = data; self.verdict = verdict
            self.sealMark = sealMark || lifeMark; self.lifeMark = lifeMark; self.follows = follows
        }
    }

    package enum Action: Equatable, Sendable {
        /// The wait ends: committed (nil) or failed.
        case report(Waiter, CommandError?)
        /// Send this publication now (in the order given).
        case publish(Publication)
        /// Send it again after this long.
        case publishLater(Publication, after: Duration)
        /// Another node's batches arrived (after loading): the coordinator takes them in.
        case foreignBatches
        /// Store this snapshot of the room in the engine.
        case storeSnapshot(SnapshotRecord)
        /// Check the consumer (``checkDelivery(now:)``) after this long.
        case watch(after: Duration)
        /// Replace the consumer by one from this stream sequence on: `missed` when a message
        /// delivered there was not the stream's (it must be read again from there), else
        /// the consumer only stalled (a shard's follower goes on from where it is).
        case refollow(from: UInt64, missed: Bool)
        /// A tombstone of the room's life was delivered at its place: the room was deleted.
        case deleted
        /// The room's stream of its own ends with its move into its shard: the room lives
        /// there from now on (``movedOut``).
        case moved
        /// The stream is read up to where it ended when the room was opened.
        case caughtUp
        case log(String)
        /// An engine message of this kind was not believed: count it (and log it, rate-limited).
        case rejected(kind: String, why: String)
        /// Read the message at this stream sequence from the stream itself (not through the
        /// consumer) and tell ``readBack(seq:found:now:)`` what is there.
        case readBack(seq: UInt64)
    }

    /// A node stores a snapshot when one of its own batches is delivered this many stream
    /// messages after the last snapshot it loaded or stored (every node that writes does,
    /// so the engine has one at most about this far behind the stream's end).
    package static let snapshotDistance: UInt64 = 1000
    /// How long the consumer may deliver nothing while a stored batch waits.
    package static let stallNanoseconds: UInt64 = 500_000_000
    /// Refused publications are tried this many times before the batch fails.
    package static let refusedAttempts = 300
    /// Messages of one room in flight at once, by default: one. (A message stored but not
    /// delivered yet is in flight: the next one follows it only once the consumer showed it
    /// where the engine said. With more than one, the later links follow the engine's word
    /// on the earlier ones' places, with `Nats-Expected-Last-Msg-Id` as the only check.) A chain of two or more
    /// needs `Nats-Expected-Last-Msg-Id`, and NATS 2.15.1 halts a replicated stream when
    /// two writers race with it ("stream write error: last msgid mismatch": the stream
    /// answers nothing more until its servers restart); NATS 2.9 did not. Group commit
    /// still puts everything that queued meanwhile into the next message.
    package static let defaultPipelineDepth = 1
    /// A message carries batches up to this many bytes (a single larger batch goes alone;
    /// the engine takes up to 1 MB by default).
    package static let maxGroupBytes = 256 * 1024
    /// How many stored forwarded commands are remembered (a duplicate comes within
    /// seconds: a resend, or a node that gave up waiting and decides it itself).
    package static let forwardMemory = 100_000

    /// A forwarded command decided here that changed nothing, recorded in the stream after
    /// room seq `after` so that no other node decides it again (the coordinator's fence).
    package struct Fence: Equatable, Sendable {
        package let after: Int
        package let id: String
        package let record: KeyedOutcome

        package init(after: Int, id: String, record: KeyedOutcome) { self.after = after; self.id = id; self.record = record }

        var headerEntry: String {
            switch record {
            case .applied, .unchanged: "\(after)/u=\(id)"
            case let .refused(error): "\(after)/\(error.code.rawValue)/\(Base64URL.encode(Array(error.message.utf8)))=\(id)"
            }
        }
    }

    private struct Queued: Sendable {
        /// Nil for a fence.
        let batch: EventBatch?
        let fence: Fence?
        let generation: Int
        let waiter: Waiter
        let commandKey: String?

        /// The room seqs it covers: a fence covers none (it follows `after`).
        var firstSeq: Int { batch?.firstSeq ?? fence!.after + 1 }
        var lastSeq: Int { batch?.lastSeq ?? fence!.after }
        var bytes: Int { batch.map { $0.frameBytes.count + 1 } ?? (fence!.headerEntry.utf8.count + 1) }
    }

    /// A message of the chain, sent and not settled yet.
    private struct Link: Sendable {
        var publication: Publication
        /// Sent when every earlier link was known stored: another message at its place is
        /// a conflict, not the chain waiting for an earlier link's retry.
        var sentAsHead: Bool
        /// Answered, not stored, while an earlier link was unsettled: sent again once the
        /// earlier one is stored.
        var resend = false
        var stored: UInt64?
        /// The consumer delivered it at `stored`, sealed: committed.
        var confirmed = false
        /// The engine said another message is at its place: the consumer will show which.
        var contested = false
        /// The consumer delivered it at its place before the engine said it stored it
        /// there: the delivery is held (``held``) until the engine's answer or the stream
        /// read back confirms it.
        var seenAt: UInt64?
    }

    package let room: RoomID
    /// Message ids are this and a counter: unique to this node, room and incarnation.
    package let messageIDPrefix: String
    /// Events kept in the history, and never fewer than 10,000: the coordinator takes
    /// other nodes' batches from there.
    package let resumeWindow: Int
    /// The stream's creation time: snapshots name it, so none outlives its incarnation.
    package let streamCreated: Int64
    /// How many messages may be in flight at once.
    package let pipelineDepth: Int
    /// The room has a stream of its own, so its messages are consecutive: the message at
    /// the place after stream seq N is at N + 1. In a shard (false) it is the room's next
    /// message after N, wherever the stream put it.
    package let contiguous: Bool
    /// In a shard: the shard, and the stream sequence of the room's first message in this
    /// life (snapshots name them, so none is taken for another life of the room).
    package let shard: Int?
    package let lifeStart: UInt64?
    /// The room's tombstone was delivered: it is deleted.
    package private(set) var deleted = false
    /// The room's stream of its own ends with the fence of its move into its shard: its
    /// state at the fence (``stored``) is what the shard's first message holds.
    package private(set) var movedOut = false
    /// The room's messages delivered since the last snapshot this node loaded or stored.
    private var sinceSnapshot: UInt64 = 0

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
    /// The messages sent and not settled, in chain order.
    private var chain: [Link] = []
    /// The stream sequence of the message that ends at each room seq (delivered or
    /// stored; where a link in flight will land is its own).
    private var streamSeqOf: [Int: UInt64]
    private var generation = 0
    /// The generation each message sent and not delivered yet was decided in.
    private var sentGeneration: [String: Int] = [:]
    /// Set after a failure: every batch of the failed generation fails alike, reported
    /// once the consumer has delivered past `failureAfter`.
    private var failure: CommandError?
    private var failureAfter: UInt64 = 0
    package private(set) var closed = false
    /// Stored (as the engine says), reported once the consumer delivers them, by stream
    /// sequence: the id of the message that must be there, and its waits.
    private var awaiting: [UInt64: (messageID: String, waiters: [Waiter])] = [:]
    /// Failures reported once the consumer has delivered past `after`.
    private var heldFailures: [(after: UInt64, waiter: Waiter, error: CommandError)] = []
    /// Deliveries held, in order, behind one that only the consumer says is in the stream
    /// (its inbox is open to anyone holding the engine's credentials): this node's message
    /// at its place before the engine said it stored it there, or a message not believed
    /// (which, passed over, would move where the room's next message goes). Folded once the
    /// engine's answer or the stream read back confirms the first; dropped if not.
    private var held: [Delivery] = []
    /// The stream position being read back for the first held delivery.
    private var readingBack: UInt64?
    /// A stream position the stream, read back, holds the held delivery at: not held again.
    private var confirmedPlace: UInt64?
    /// Deliveries the stream, read back, did not hold: put into the consumer's inbox.
    package private(set) var refutedDeliveries = 0
    /// The stream position of the last snapshot this node loaded or stored.
    private var snapshotSeq: UInt64
    private var published = 0
    package private(set) var broken: String?
    /// The room's seal mark was delivered (or is behind where it was loaded from): every
    /// message from here on must be sealed.
    package private(set) var sealed: Bool
    /// The room's life mark was delivered (or is behind where it was loaded from): every
    /// message from here on must be sealed bound to the room's life; one sealed by a build
    /// before lives were bound (``EngineTrust/Verdict/sealedUnbound``) may be of an earlier
    /// life, and is passed over.
    package private(set) var lifeBound: Bool
    /// Messages passed over: without a valid seal, or unsealed after the seal mark.
    package private(set) var rejected = 0
    /// Publications another node's batch got ahead of.
    package private(set) var conflicts = 0
    /// Publications the engine said another message stood in place of, which the consumer
    /// then delivered at their place (a conflict believed would have decided them again).
    package private(set) var contestedStored = 0
    /// The node that wrote the last message delivered.
    package private(set) var lastWriter: String?
    /// The writers of the last ``writerWindow`` messages delivered, oldest first from
    /// `recentHead` on (a ring).
    private var recentWriters: [String] = []
    private var recentHead = 0
    /// How many of `recentWriters` each node wrote (kept as they change: ``writer`` is
    /// read for every command a forwarding node routes).
    private var recentCounts: [String: Int] = [:]
    /// How many of the latest messages ``writer`` counts.
    package static let writerWindow = 64
    /// The last seq the coordinator has published: the history keeps every batch after it.
    private var publishedThrough: Int
    /// The forwarded commands the stream holds, by id: the room seq their batch ends at.
    private var storedForwards: [String: KeyedOutcome] = [:]
    /// The same ids, oldest first (from `forwardHead` on), for forgetting the oldest.
    private var forwardOrder: [String] = []
    private var forwardHead = 0
    /// Messages sent, and the batches they carried (first attempts only).
    package private(set) var messagesSent = 0
    package private(set) var batchesSent = 0
    /// When the consumer last delivered, and whether a watch is scheduled.
    private var lastDelivery: UInt64 = 0
    private var watching = false

    /// A room read from `start` (a snapshot at stream sequence `from`, or the genesis at
    /// 1), whose stream ended at `streamEnd` when it was opened.
    package init(room: RoomID, start: StoredState, owners: [ClientID: String], incarnations: [String: String] = [:],
                 from: UInt64, streamEnd: UInt64, streamCreated: Int64, resumeWindow: Int, messageIDPrefix: String,
                 pipelineDepth: Int = ClusterRoomMachine.defaultPipelineDepth, sealed: Bool = false, lifeBound: Bool = false,
                 shard: Int? = nil, lifeStart: UInt64? = nil) {
        self.contiguous = shard == nil
        self.shard = shard
        self.lifeStart = lifeStart
        self.room = room
        self.sealed = sealed || lifeBound
        self.lifeBound = lifeBound
        self.publishedThrough = start.snapshot.seq
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
        // In a shard the engine takes one expectation per room at a time.
        self.pipelineDepth = shard == nil ? max(1, pipelineDepth) : 1
    }

    /// The body of a message carrying `batches`.
    package static func body(_ batches: [EventBatch]) -> [UInt8] {
        if batches.count == 1 { return batches[0].frameBytes }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(batches.reduce(0) { $0 + $1.frameBytes.count + 1 })
        for (i, batch) in batches.enumerated() {
            if i > 0 { bytes.append(0x0A) }
            bytes += batch.frameBytes
        }
        return bytes
    }

    /// The batches of a message's body, or nil when a line is not an `events` frame.
    package static func batches(in body: [UInt8]) -> [EventBatch]? {
        var batches: [EventBatch] = []
        for line in body.split(separator: 0x0A, omittingEmptySubsequences: false) {
            guard case let .events(batch)? = try? ServerFrame(bytes: Array(line)) else { return nil }
            batches.append(batch)
        }
        return batches.isEmpty ? nil : batches
    }

    // MARK: Appending

    /// The coordinator rolled back: batches of older generations fail `rolled back`.
    package mutating func reset(generation: Int) {
        self.generation = generation
        failure = nil
    }

    /// A batch to append, decided in `generation`; `commandKey` when it is a forwarded
    /// command's (its id goes into the message's header).
    package mutating func append(_ batch: EventBatch, generation: Int, waiter: Waiter, commandKey: String? = nil) -> [Action] {
        if closed { return [.report(waiter, closedError)] }
        if generation < self.generation { return [.report(waiter, .unavailable("rolled back"))] }
        if let failure { return fail(waiter, failure) }
        queue.append(Queued(batch: batch, fence: nil, generation: generation, waiter: waiter, commandKey: commandKey))
        return chain.count + awaiting.count < pipelineDepth ? advance() : []
    }

    /// A fence to record, decided in `generation`: its message expects the stream to end
    /// where room seq `fence.after` does, like a batch decided on that state. Committed
    /// (reported) once delivered at that place; another message there makes it a conflict.
    package mutating func fence(_ fence: Fence, generation: Int, waiter: Waiter) -> [Action] {
        if closed { return [.report(waiter, closedError)] }
        if generation < self.generation { return [.report(waiter, .unavailable("rolled back"))] }
        if let failure { return fail(waiter, failure) }
        queue.append(Queued(batch: nil, fence: fence, generation: generation, waiter: waiter, commandKey: fence.id))
        return chain.count + awaiting.count < pipelineDepth ? advance() : []
    }

    /// Sends what the queue holds while the chain has room: each message takes every
    /// queued batch that follows on from the one before it, up to ``maxGroupBytes``.
    private mutating func advance() -> [Action] {
        var actions: [Action] = []
        // A message stored but not delivered yet counts: the next one follows it only once
        // the consumer showed it is where the engine said.
        while chain.count + awaiting.count < pipelineDepth, !queue.isEmpty {
            var group: [Queued] = []
            var bytes = 0
            while let next = queue.first {
                if let failure {
                    queue.removeFirst()
                    actions += fail(next.waiter, failure)
                    continue
                }
                if next.generation < generation {
                    queue.removeFirst()
                    actions.append(.report(next.waiter, .unavailable("rolled back")))
                    continue
                }
                let size = next.bytes
                if let last = group.last {
                    guard next.firstSeq == last.lastSeq + 1, next.generation == last.generation,
                          bytes + size <= Self.maxGroupBytes else { break }
                }
                queue.removeFirst()
                group.append(next)
                bytes += size
            }
            guard let first = group.first else { break }
            guard let expected = place(after: first.firstSeq - 1) else {
                // Decided on a state this node cannot place in the stream (every base is a
                // delivered, stored or chained batch, so this is a fault).
                queue.insert(contentsOf: group.dropFirst(), at: 0)
                actions += failAll(first: [first.waiter], .unavailable("the batch's place in the stream is unknown"), after: nil)
                continue
            }
            let previous = chain.last.flatMap { $0.publication.lastSeq == first.firstSeq - 1 ? $0 : nil }
            published += 1
            var publication = Publication(waiters: group.map(\.waiter), batches: group.compactMap(\.batch), lastSeq: group.last!.lastSeq,
                                          expectedLastSeq: expected, expectedLastMessageID: previous?.publication.messageID,
                                          messageID: "\(messageIDPrefix)-\(published)")
            for queued in group {
                if let fence = queued.fence { publication.fences.append(fence) }
                else if let id = queued.commandKey, let batch = queued.batch { publication.forwards[batch.lastSeq] = id }
            }
            chain.append(Link(publication: publication, sentAsHead: chain.isEmpty))
            sentGeneration[publication.messageID] = first.generation
            messagesSent += 1
            batchesSent += publication.batches.count
            actions.append(.publish(publication))
        }
        return actions
    }

    /// Whether `publication` is still to be sent (not answered, not failed by a close).
    package func isInFlight(_ publication: Publication) -> Bool {
        !closed && chain.contains { $0.publication.messageID == publication.messageID && $0.publication.attempt == publication.attempt }
    }

    /// The engine's answer to `publication`, at `now`. An answer after a close (which
    /// failed the publication's wait already), to an attempt sent again since, or to a
    /// link failed with an earlier one, changes nothing.
    package mutating func published(_ publication: Publication, _ outcome: PublishOutcome, now: UInt64) -> [Action] {
        guard !closed, let i = chain.firstIndex(where: { $0.publication.messageID == publication.messageID }),
              chain[i].publication.attempt == publication.attempt else { return [] }
        // Delivered at its place and held: an answer that does not say it is stored there
        // leaves the stream itself to say.
        if let seen = chain[i].seenAt, outcome != .stored(seq: seen) {
            return readBack() + answered(i, publication, outcome, now: now)
        }
        return answered(i, publication, outcome, now: now)
    }

    private mutating func answered(_ i: Int, _ publication: Publication, _ outcome: PublishOutcome, now: UInt64) -> [Action] {
        var actions: [Action] = []
        switch outcome {
        case let .stored(seq) where contiguous ? seq != publication.expectedLastSeq + 1 : seq <= publication.expectedLastSeq:
            // Stored with a compare-and-set, a message can only be at the place it expected
            // (in a shard: somewhere after the room's message it expected): an answer naming
            // another is not the engine's. Asked again (the same id).
            let again = retry(i)
            return [.rejected(kind: "ack", why: "room '\(room)': a publish answer naming stream seq \(seq) for a message that expected \(publication.expectedLastSeq)"),
                    .publishLater(again, after: .milliseconds(50))]
        case let .stored(seq):
            if chain[i].stored == nil { chain[i].stored = seq }
            // The engine's answer and the consumer agree: what was held is folded.
            if chain[i].seenAt != nil { return release(now: now) + settleChain(now: now) + advance() }
        case .wrongLastSequence:
            guard chain[i].sentAsHead else { chain[i].resend = true; break }
            if delivered > publication.expectedLastSeq {
                // The consumer passed its place with another message there (its own would
                // have been confirmed): a conflict.
                conflicts += 1
                let failed = chain.flatMap(\.publication.waiters)
                forgetChain()
                return failAll(first: failed, .conflict(), after: publication.expectedLastSeq) + advance()
            }
            // Not the last word on its place: around a partition a server that still takes
            // itself for the stream's leader answers this while the leader stores the
            // message, and a retry's earlier attempt may be what stands there. What the
            // consumer delivers at the place decides (``delivered(_:now:)``); until then it
            // goes again, and the consumer is watched.
            chain[i].contested = true
            guard i == 0 else { chain[i].resend = true; break }
            let again = retry(0)
            let log: [Action] = again.attempt == 1 || again.attempt % 20 == 0
                ? [.log("room '\(room)': the engine says another message is at a batch's place; waiting for the consumer to show it")] : []
            return log + watch(now: now) + [.publishLater(again, after: .milliseconds(min(50 * again.attempt, 250)))]
        case let .unknown(why):
            guard i == 0 else { chain[i].resend = true; break }
            let again = retry(0)
            let log: [Action] = again.attempt == 1 || again.attempt % 20 == 0
                ? [.log("room '\(room)': no answer from the engine for a batch (\(why)); asking again")] : []
            // Elections answer "no responders" at once: a short pause between attempts.
            return log + [.publishLater(again, after: .milliseconds(min(50 * again.attempt, 250)))]
        case let .failed(why):
            guard i == 0 else { chain[i].resend = true; break }
            if publication.attempt + 1 >= Self.refusedAttempts {
                let failed = chain.flatMap(\.publication.waiters)
                forgetChain()
                return failAll(first: failed, .unavailable("the engine refused the batch: \(why)"), after: nil) + advance()
            }
            let again = retry(0)
            let log: [Action] = again.attempt == 1 || again.attempt % 20 == 0
                ? [.log("room '\(room)': the engine refused a batch (\(why)); trying again")] : []
            return log + [.publishLater(again, after: .milliseconds(min(50 * again.attempt, 500)))]
        }
        actions += settleChain(now: now)
        return actions + advance()
    }

    /// The chain's link `i` as it is sent again, now as the head.
    private mutating func retry(_ i: Int) -> Publication {
        chain[i].publication.attempt += 1
        chain[i].sentAsHead = true
        chain[i].resend = false
        return chain[i].publication
    }

    /// Takes the stored links off the chain's head (their batches wait for the consumer)
    /// and sends again a new head that was answered while an earlier link was unsettled.
    private mutating func settleChain(now: UInt64) -> [Action] {
        var actions: [Action] = []
        while let head = chain.first, let seq = head.stored {
            // In a shard the answer cannot name the place (other rooms' messages fall
            // between): only this message delivered right after the one it expected does.
            // It stays at the chain's head until then (the consumer is watched meanwhile); an
            // answer naming another place keeps nothing waiting there.
            if !contiguous, !head.confirmed {
                actions += watch(now: now)
                break
            }
            chain.removeFirst()
            streamSeqOf[head.publication.lastSeq] = seq
            if head.confirmed {
                actions += head.publication.waiters.map { .report($0, nil) }
            } else if delivered >= seq {
                // The consumer passed that place without it: the answer was not the engine's,
                // or another message is there. Either way it is not stored there.
                actions.append(.rejected(kind: "ack", why: "room '\(room)': a publish answer for stream seq \(seq), where the stream holds another message"))
                conflicts += 1
                sentGeneration[head.publication.messageID] = nil
                let failed = head.publication.waiters + chain.flatMap(\.publication.waiters)
                forgetChain()
                actions += failAll(first: failed, .conflict(), after: seq - 1)
                return actions
            } else {
                awaiting[seq] = (head.publication.messageID, head.publication.waiters)
                actions += watch(now: now)
            }
        }
        if let head = chain.first, head.resend { actions.append(.publish(retry(0))) }
        return actions
    }

    /// Watches the consumer (``checkDelivery(now:)``) unless it is watched already.
    private mutating func watch(now: UInt64) -> [Action] {
        guard !watching else { return [] }
        watching = true
        lastDelivery = max(lastDelivery, now)
        return [.watch(after: .nanoseconds(Int(Self.stallNanoseconds)))]
    }

    /// Another message, at stream seq `seq`, took the place after `previous`: a link of the chain that was to land there,
    /// and every link after it, never will. A conflict, reported at once (past what took
    /// the place) unless a stored batch of this node is still to come.
    private mutating func placeTaken(after previous: UInt64, by seq: UInt64) -> [Action] {
        guard let i = chain.firstIndex(where: { $0.publication.expectedLastSeq == previous }) else { return [] }
        conflicts += 1
        let failed = chain[i...].flatMap(\.publication.waiters)
        for link in chain[i...] { sentGeneration[link.publication.messageID] = nil }
        chain.removeSubrange(i...)
        return failAll(first: failed, .conflict(), after: seq - 1)
    }

    /// Drops the chain: it failed from its head on, and none of it will be delivered.
    private mutating func forgetChain() {
        for link in chain { sentGeneration[link.publication.messageID] = nil }
        chain = []
    }

    /// The stream sequence of the message that ends at room seq `seq`: a link of the
    /// chain (where it will land), else a delivered or stored message.
    private func place(after seq: Int) -> UInt64? {
        if let link = chain.last(where: { $0.publication.lastSeq == seq }) {
            return link.stored ?? (contiguous ? link.publication.expectedLastSeq + 1 : nil)
        }
        return streamSeqOf[seq]
    }

    /// Fails `first` and every queued batch with `error`: a conflict once the consumer has
    /// delivered past `after` (what took the batch's place), and past every batch of this
    /// node stored but not delivered yet; another failure likewise past what is stored.
    private mutating func failAll(first: [Waiter], _ error: CommandError, after: UInt64?) -> [Action] {
        failure = error
        var past = after ?? (delivered > 0 ? delivered - 1 : 0)
        if let stored = awaiting.keys.max(), stored > 0 { past = max(past, stored - 1) }
        failureAfter = past
        let all = first + queue.map(\.waiter)
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
        if let last = held.last {
            // Behind a held delivery, in order.
            if message.streamSeq > last.streamSeq { held.append(message) }
            return []
        }
        let believed = believes(message)
        // The room's message before this one: the place it is at.
        let previous = delivered
        if confirmedPlace != message.streamSeq {
            if believed, message.verdict.isNodeSeal, let id = message.messageID,
               let i = chain.firstIndex(where: { $0.publication.messageID == id }),
               chain[i].publication.expectedLastSeq == previous, chain[i].stored != message.streamSeq {
                // One of this node's messages at its place, which the engine has not said it
                // stored there: anyone holding the engine's credentials can put a copy of a
                // message that lost its place into the consumer's inbox. Held until the
                // engine's answer says so, or (when the answers disputed it or were lost) the
                // stream read back does.
                held = [message]
                chain[i].seenAt = message.streamSeq
                // An answer that named another place (or none yet, after a dispute or a
                // resend) leaves the stream itself to say.
                return chain[i].contested || chain[i].publication.attempt > 0 || chain[i].stored != nil ? readBack() : []
            }
            if !believed {
                // Passed over, it would move the place the room's next message expects: only
                // if the stream holds it there.
                held = [message]
                return readBack()
            }
        }
        if believed, message.kind == EngineNames.tombstoneKind { return tombstone(message) }
        // A move's fence ends a stream of its own; in a shard, a room's life begins with one.
        if believed, message.kind == EngineNames.movedKind, contiguous { return moved(message) }
        if message.kind == EngineNames.movedKind { return passedOver(message, believed: believed) }
        if !believed || message.kind == "genesis" || message.kind == EngineNames.sealMarkKind {
            return passedOver(message, believed: believed)
        }
        if let writer = message.writer {
            lastWriter = writer
            if recentWriters.count < Self.writerWindow {
                recentWriters.append(writer)
            } else {
                let old = recentWriters[recentHead]
                recentCounts[old] = recentCounts[old]! == 1 ? nil : recentCounts[old]! - 1
                recentWriters[recentHead] = writer
                recentHead = (recentHead + 1) % Self.writerWindow
            }
            recentCounts[writer, default: 0] += 1
        }
        var reports: [Action] = []
        var others = false
        var snapshot: SnapshotRecord?
        var settled: [Action] = []
        do {
            // A message of fences only has no body (``Publication/fences``).
            let fencesOnly = message.data.isEmpty && (message.forwards?.contains("/") ?? false)
            guard let batches = fencesOnly ? [] : Self.batches(in: message.data) else {
                return breakRoom("room '\(room)': stream message \(message.streamSeq) is not a batch")
            }
            for batch in batches {
                do { try stored.apply(batch) } catch {
                    return breakRoom("room '\(room)': stream message \(message.streamSeq) does not fold: \(error)")
                }
                stored.history.append(batch)
                for e in batch.events {
                    switch e.event {
                    case let .clientJoined(c): owners[c.id] = message.writer ?? ""
                    case let .clientLeft(id): owners[id] = nil
                    // The list is gone (counted) or starts again (listed): so are its owners.
                    case .presenceCounted, .presenceListed: owners = [:]
                    default: break
                    }
                }
            }
            delivered = message.streamSeq
            let lastSeq = batches.last?.lastSeq ?? stored.snapshot.seq
            let firstSeq = batches.first?.firstSeq ?? lastSeq + 1
            if let forwards = message.forwards { remember(forwards, first: firstSeq, last: lastSeq) }
            streamSeqOf[lastSeq] = message.streamSeq
            if streamSeqOf.count > 4096 { streamSeqOf = streamSeqOf.filter { $0.key >= lastSeq - 1024 } }
            trimHistory()
            if let writer = message.writer, let incarnation = message.incarnation { incarnations[writer] = incarnation }
            let own = isOwn(message)
            // One of this node's messages, back at its place: committed. It may come before
            // the engine's answer (a link of the chain) or after it (awaited).
            var committedHere = false
            if message.verdict.isNodeSeal, let id = message.messageID, let i = chain.firstIndex(where: { $0.publication.messageID == id }),
               chain[i].publication.expectedLastSeq == previous {
                if chain[i].contested {
                    contestedStored += 1
                    settled.append(.log("room '\(room)': a batch the engine said another message stood in place of is at its place (stream seq \(message.streamSeq)): committed, not decided again"))
                }
                chain[i].stored = message.streamSeq
                chain[i].confirmed = true
                settled += settleChain(now: now)
                committedHere = true
            } else {
                settled = placeTaken(after: previous, by: message.streamSeq)
            }
            if let awaited = awaiting.removeValue(forKey: message.streamSeq) {
                if message.verdict.isNodeSeal, message.messageID == awaited.messageID {
                    reports += awaited.waiters.map { .report($0, nil) }
                    committedHere = true
                } else {
                    // The engine said this node's message is here; another one is.
                    settled.append(.rejected(kind: "ack", why: "room '\(room)': a publish answer for stream seq \(message.streamSeq), where the stream holds another message"))
                    settled += conflictAt(message.streamSeq, waiters: awaited.waiters)
                }
            }
            // By stream distance, whoever wrote the batches in between: a room stays
            // loadable from a snapshot and the kept tail however its writers come and go.
            sinceSnapshot += 1
            if committedHere, sinceSnapshot >= Self.snapshotDistance {
                snapshotSeq = delivered
                sinceSnapshot = 0
                snapshot = snapshotRecord
            }
            // This node's own messages are no news to the coordinator, which holds their
            // batches already (one delivered before its answer came back, too) — unless it
            // rolled back since.
            if !loading, !own { others = true }
        }
        let ready = heldFailures.filter { delivered > $0.after }
        heldFailures.removeAll { delivered > $0.after }
        reports += ready.map { .report($0.waiter, $0.error) }
        var actions: [Action] = []
        if loading, delivered >= target {
            loading = false
            actions.append(.caughtUp)
        }
        actions += reports + settled
        if others { actions.append(.foreignBatches) }
        if let snapshot { actions.append(.storeSnapshot(snapshot)) }
        return actions + advance()
    }

    /// Asks for the first held delivery's place to be read back from the stream (once at a time).
    private mutating func readBack() -> [Action] {
        guard readingBack == nil, let first = held.first else { return [] }
        readingBack = first.streamSeq
        return [.readBack(seq: first.streamSeq)]
    }

    /// What the stream holds at `seq` (nil: nothing), read back for the first held
    /// delivery. The same message there folds (or passes over) what was held; anything else
    /// drops it (the delivery was not the engine's), and the stream is followed again
    /// from where the room was.
    package mutating func readBack(seq: UInt64, found: Delivery?, now: UInt64) -> [Action] {
        if readingBack == seq { readingBack = nil }
        guard !closed, broken == nil, let first = held.first, first.streamSeq == seq else { return [] }
        if let found, found.isSameMessage(as: first) {
            confirmedPlace = seq
            if let id = first.messageID, let i = chain.firstIndex(where: { $0.publication.messageID == id }),
               chain[i].publication.expectedLastSeq == delivered { chain[i].stored = seq }
            return release(now: now) + settleChain(now: now) + advance()
        }
        held = []
        refutedDeliveries += 1
        rejected += 1
        if let id = first.messageID, let i = chain.firstIndex(where: { $0.publication.messageID == id }) { chain[i].seenAt = nil }
        let what = found.map { "another message (\($0.messageID ?? "no id"), by \($0.writer ?? "no node"))" } ?? "no message"
        return [
            .rejected(kind: "delivery", why: "room '\(room)': stream seq \(seq) was delivered as a message (\(first.messageID ?? "no id"), by \(first.writer ?? "no node")) the stream does not hold; it holds \(what) there: passed over"),
            .refollow(from: delivered + 1, missed: true),
        ]
    }

    /// Folds the held deliveries, in order (one of this node's may be held again).
    private mutating func release(now: UInt64) -> [Action] {
        let queued = held
        held = []
        var actions: [Action] = []
        for message in queued { actions += delivered(message, now: now) }
        return actions
    }

    /// The room as delivered, to store as its snapshot.
    package var snapshotRecord: SnapshotRecord {
        SnapshotRecord(streamCreated: streamCreated, streamSeq: delivered, state: stored, owners: owners, incarnations: incarnations,
                       sealed: sealed, lifeBound: lifeBound, shard: shard, lifeStart: lifeStart)
    }

    /// Whether a message is believed, by its seal and the room's marks.
    private func believes(_ message: Delivery) -> Bool {
        // In a shard the seal names the room's message it follows: anywhere else it is a
        // copy put there by someone else.
        if let follows = message.follows, follows != delivered { return false }
        return switch message.verdict {
        case .sealed: true
        case .sealedUnbound: !lifeBound
        case .unsigned: !sealed
        case .forged: false
        }
    }

    /// A message that holds no batch to fold: the room's first message, its seal mark, or
    /// one not believed. Its place is passed: the room's next message follows it. A message
    /// of this node's that the engine said is there is not.
    private mutating func passedOver(_ message: Delivery, believed: Bool) -> [Action] {
        var actions: [Action] = []
        if believed, message.verdict.isNodeSeal, message.sealMark { sealed = true }
        // A life mark is believed only bound to the room's life itself.
        if believed, message.verdict == .sealed, message.lifeMark { lifeBound = true }
        if !believed {
            rejected += 1
            let why = switch message.verdict {
            case .sealed where message.follows != nil && message.follows != delivered:
                "it says it follows the room's message at stream seq \(message.follows!), not the one before it (a copy of a message of another place)"
            case .forged: "its seal does not open (forged, altered, moved, replayed, or of another life of the room)"
            case .sealedUnbound: "it is sealed without the room's life, and the room's messages are bound to its life since its life mark"
            default: "it is not sealed, and the room's messages are since its seal mark"
            }
            actions.append(.rejected(kind: "batch", why: "room '\(room)': stream message \(message.streamSeq) passed over: \(why)"))
        }
        let previous = delivered
        delivered = message.streamSeq
        streamSeqOf[stored.snapshot.seq] = message.streamSeq
        actions += placeTaken(after: previous, by: message.streamSeq)
        if let awaited = awaiting.removeValue(forKey: message.streamSeq) {
            actions.append(.rejected(kind: "ack", why: "room '\(room)': a publish answer for stream seq \(message.streamSeq), where the stream holds another message"))
            actions += conflictAt(message.streamSeq, waiters: awaited.waiters)
        }
        let ready = heldFailures.filter { delivered > $0.after }
        heldFailures.removeAll { delivered > $0.after }
        actions += ready.map { .report($0.waiter, $0.error) }
        if loading, delivered >= target {
            loading = false
            actions.append(.caughtUp)
        }
        return actions + advance()
    }

    /// The room's tombstone, sealed for its life at its place: the room is deleted. Every
    /// wait fails; the shell closes the room.
    private mutating func tombstone(_ message: Delivery) -> [Action] {
        deleted = true
        return ended(at: message.streamSeq, "deleted (its tombstone is at stream seq \(message.streamSeq))", error: "deleted", action: .deleted)
    }

    /// The fence of the room's move into its shard, at its place: nothing more is appended
    /// here, every wait fails (what is in flight fails its compare-and-set anyway), and the
    /// room is served from its shard.
    private mutating func moved(_ message: Delivery) -> [Action] {
        movedOut = true
        return ended(at: message.streamSeq, "moved into its shard (the fence is at stream seq \(message.streamSeq) of its own stream)",
                     error: "moved; try again", action: .moved)
    }

    /// This log of the room ends at `seq`: every wait fails, a load is over, and the shell
    /// hears `action`.
    private mutating func ended(at seq: UInt64, _ line: String, error: String, action: Action) -> [Action] {
        delivered = seq
        let wasLoading = loading
        loading = false
        return [.log("room '\(room)': \(line)")] + failEverything(.unavailable("room '\(room)' \(error)")) + (wasLoading ? [.caughtUp] : []) + [action]
    }

    /// This node's batches that the engine said are at `seq`, where the consumer delivered
    /// another message: a conflict, like a refused compare-and-set.
    private mutating func conflictAt(_ seq: UInt64, waiters: [Waiter]) -> [Action] {
        conflicts += 1
        return failAll(first: waiters, .conflict(), after: seq - 1)
    }

    /// The room's writer, to which other nodes forward their clients' commands: the node
    /// that wrote most of the latest ``writerWindow`` messages (of several alike, the one
    /// that wrote last). One join on another node does not move it; a writer that stopped
    /// writing loses it as the others append.
    package var writer: String? {
        guard let most = recentCounts.values.max() else { return lastWriter }
        if let last = lastWriter, recentCounts[last] == most { return last }
        let leaders = recentCounts.filter { $0.value == most }
        if leaders.count == 1 { return leaders.first!.key }
        // Several alike: the most recent of them.
        for i in 0..<recentWriters.count {
            let w = recentWriters[(recentHead + recentWriters.count - 1 - i) % recentWriters.count]
            if leaders[w] != nil { return w }
        }
        return lastWriter
    }

    /// What the stream holds of the forwarded command `id` (as far as it was delivered
    /// here): its batch, or the fence of a decision that changed nothing.
    package func storedOutcome(_ id: String) -> KeyedOutcome? { storedForwards[id] }

    /// Takes note of a message's forwarded commands (``Publication/forwardsHeader``: a
    /// batch's entry must name one of the message's own seqs, `first` to `last`, a fence's
    /// one from `first - 1` to `last`; others are ignored), forgetting the oldest past ``forwardMemory``. The
    /// first record of an id is the one that stands.
    private mutating func remember(_ header: String, first: Int, last: Int) {
        for pair in header.split(separator: ",") {
            guard let eq = pair.lastIndex(of: "=") else { continue }
            let id = String(pair[pair.index(after: eq)...])
            guard !id.isEmpty, storedForwards[id] == nil, let record = Self.record(pair[..<eq], first: first, last: last) else { continue }
            storedForwards[id] = record
            forwardOrder.append(id)
        }
        while forwardOrder.count - forwardHead > Self.forwardMemory {
            storedForwards[forwardOrder[forwardHead]] = nil
            forwardHead += 1
        }
        if forwardHead > Self.forwardMemory / 2 {
            forwardOrder.removeFirst(forwardHead)
            forwardHead = 0
        }
    }

    /// The record one `Tabd-Forwards` key names: `SEQ`, `SEQ/u` or `SEQ/CODE/MESSAGE`.
    private static func record(_ key: Substring, first: Int, last: Int) -> KeyedOutcome? {
        let parts = key.split(separator: "/", omittingEmptySubsequences: false)
        guard let seq = Int(parts[0]) else { return nil }
        if parts.count == 1 { return seq >= first && seq <= last ? .applied(seq: seq) : nil }
        guard seq >= first - 1, seq <= last else { return nil }
        if parts.count == 2, parts[1] == "u" { return .unchanged(seq: seq) }
        guard parts.count == 3, let code = ErrorCode(rawValue: String(parts[1])),
              let message = Base64URL.decode(parts[2].utf8) else { return nil }
        return .refused(CommandError(code, String(decoding: message, as: UTF8.self)))
    }

    /// Whether the coordinator holds `message`'s batches already: this machine sent it
    /// in the coordinator's current generation (a rollback since threw them away).
    private mutating func isOwn(_ message: Delivery) -> Bool {
        guard let id = message.messageID, let sent = sentGeneration.removeValue(forKey: id) else { return false }
        return sent == generation
    }

    /// A message that does not fold: nothing waits for a stream that no longer does.
    private mutating func breakRoom(_ why: String) -> [Action] {
        broken = why
        let wasLoading = loading
        loading = false
        return [.log(why)] + failEverything(.unavailable(why)) + (wasLoading ? [.caughtUp] : [])
    }

    /// The coordinator has published every batch up to `seq` (``Durability/published(through:)``).
    package mutating func published(through seq: Int) { publishedThrough = max(publishedThrough, seq) }

    /// Keeps the batches of the last `resumeWindow` events, and never fewer than 10,000,
    /// and every batch the coordinator has not published yet: a node that was paused while
    /// the others wrote more than that takes them all in (before, it published from where
    /// the kept history began, and its clients saw a gap). Trimmed in steps of a quarter of
    /// that (at least 1,024 events), so that a delivery costs no copy of the whole history.
    private mutating func trimHistory() {
        guard let last = stored.history.last, let first = stored.history.first else { return }
        let keep = max(resumeWindow, 10_000)
        let floor = min(last.lastSeq - keep, publishedThrough)
        guard first.firstSeq <= floor - max(1024, keep / 4) else { return }
        let drop = stored.history.partitioningIndex { $0.lastSeq > floor }
        stored.history.removeFirst(drop)
    }

    // MARK: The consumer's watch

    /// The watch's check at `now`: while stored batches wait and nothing at all has been
    /// delivered for ``stallNanoseconds``, the consumer is replaced (it may live on a
    /// server that died, which libnats learns only seconds later).
    package mutating func checkDelivery(now: UInt64) -> [Action] {
        guard !closed, broken == nil, !awaiting.isEmpty || chain.contains(where: { $0.contested || (!contiguous && $0.stored != nil) }) else {
            watching = false
            return []
        }
        let again = Action.watch(after: .nanoseconds(Int(Self.stallNanoseconds / 2)))
        if now &- lastDelivery < Self.stallNanoseconds { return [again] }
        // In a shard, the shard's follower says when it is made again (once for its rooms).
        let log: [Action] = contiguous
            ? [.log("room '\(room)': nothing delivered for \(Self.stallNanoseconds / 1_000_000) ms while batches wait; following the stream again from \(delivered + 1)")]
            : []
        return log + [.refollow(from: delivered + 1, missed: false), again]
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
        waiters += chain.flatMap(\.publication.waiters)
        waiters += awaiting.sorted { $0.key < $1.key }.flatMap(\.value.waiters)
        waiters += heldFailures.map(\.waiter)
        queue = []
        awaiting = [:]
        heldFailures = []
        chain = []
        held = []
        readingBack = nil
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

