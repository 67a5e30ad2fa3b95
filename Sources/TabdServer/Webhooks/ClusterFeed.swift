import Auth
import Cluster
import Coordinator
import FoundationEssentials
import Glibc
import Dispatch
import Locking
import Outbox
import Portable

/// One webhook's events on a node of a cluster. The engine's history is the outbox: each
/// shard is delivered by one node, the one that holds the shard's ``WebhookLease`` for this
/// webhook, from the cursor the lease records. This node takes a shard whose lease is free
/// or whose holder is gone (its heartbeats stopped), reads the shard's messages in order
/// (``ShardEventReader``) into an outbox in memory that ``WebhookDelivery`` posts from, and
/// writes how far it has delivered into the lease, at most once a second. A write that is
/// refused means another node took the shard: what this node had not posted of it is
/// passed, not posted.
///
/// An event's id is its place in the engine's history (the shard stream, its sequence, the
/// event's index in that message), so a node that takes a shard over from the cursor posts
/// what was delivered after it again under the same id and with the same body: duplicates a
/// receiver recognises.
///
/// Threads: two of its own (the leases, the reading); the delivery's own.
final class ClusterFeed: @unchecked Sendable {
    // @unchecked Sendable: the state is touched with `condition` locked; `readers` only by the reading thread.

    let number: Int
    /// The webhook's name in the engine: 16 hex digits of a hash of its URL.
    let webhook: String
    let outbox: Outbox
    private(set) var delivery: WebhookDelivery!
    private let node: ClusterNode
    private let kinds: OutboxKinds
    private let log: Log
    /// Events read ahead of the delivery may weigh this much; past it the reading waits.
    private let readAhead: Int

    private struct Held {
        let generation: Int
        /// The lease's last stream sequence (what the next write expects).
        var last: UInt64
        /// The cursor last written.
        var written: UInt64
        var writtenAt: Double
        /// The last message read.
        var read: UInt64
        /// Positions here of events of this shard not yet delivered, with their stream sequence.
        var marks: [(position: Int, streamSeq: UInt64)] = []
        var markStart = 0
        /// When this shard was last read to its end, and where the node's follower was then.
        var caughtUpAt: Double?
        /// Uptime when the last write of the lease that the engine took was sent: the lease
        /// is this node's for ``validFor`` from then.
        var confirmedAt: Double
        /// A post waits for the lease to be confirmed.
        var wanted = false
        var hasPending: Bool { markStart < marks.count }
    }

    /// How long a write of the lease keeps it this node's, for posting: half the time other
    /// nodes wait, after this node's last heartbeat, before they take its shards. A node
    /// paused or cut off longer stops posting before another can begin.
    private var validFor: Double { node.heartbeatTimeout / 2 }

    private static func uptime() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    private let condition = ThreadCondition()
    private var held: [Int: Held] = [:]
    private var generation = 0
    /// When each shard not held here was first seen free (for taking it when another
    /// node, which it is more for, does not).
    private var freeSince: [Int: Double] = [:]
    private var pending: [(position: Int, bytes: Int)] = []
    private var pendingStart = 0
    private var pendingBytes = 0
    private var stopping = false
    private var threads = 0
    private var readFailures = 0

    init(number: Int, target: WebhookTarget, node: ClusterNode, kinds: OutboxKinds, limit: Int, log: Log) {
        self.number = number
        webhook = Hex.encode(KeyedHash.sha256(key: Array("tabd webhook".utf8), message: Array(target.url.utf8)).prefix(8))
        self.node = node
        self.kinds = kinds
        self.log = log
        readAhead = max(limit / 2, 32 * 1024)
        outbox = Outbox(id: "cluster", limit: limit, kinds: kinds)
    }

    /// Its delivery, made with ``isStale(_:)`` (called once, before ``start()``).
    func attach(_ delivery: WebhookDelivery) { self.delivery = delivery }

    /// The outbox name of a shard's events: the shard and its stream's creation time.
    static func outboxName(shard: Int, created: Int64) -> String { "shard\(shard)-\(created)" }

    /// Whether an event read here is no longer this node's to post: its shard was lost (or
    /// lost and taken again, read again from the lease's cursor). While the lease has not
    /// been confirmed for ``validFor`` (this node was paused, or the engine was away), it
    /// waits for a write of the lease to say.
    func isStale(_ entry: Outbox.Entry) -> Bool {
        let (shard, gen) = (entry.tag >> 32, entry.tag & 0xFFFF_FFFF)
        return locked {
            while true {
                guard let h = held[shard], h.generation == gen else { return true }
                if Self.uptime() - h.confirmedAt <= validFor || stopping { return false }
                held[shard]!.wanted = true
                condition.broadcast()
                _ = condition.wait(seconds: 0.25)
            }
        }
    }

    func start() {
        locked { threads = 2 }
        for name in ["leases", "reading"] {
            Threads.start(name: "tabd-webhook-\(number)-\(name)") { [self] in
                if name == "leases" { leases() } else { reading() }
                locked { threads -= 1; condition.broadcast() }
            }
        }
    }

    /// Stops reading and taking shards (once the delivery has stopped: what it posts until
    /// then is this node's to post). ``release()`` then writes where each held shard stands
    /// and frees its lease, so another node goes on from there at once.
    func stop() async {
        locked { stopping = true; condition.broadcast() }
        while locked({ threads }) > 0 { try? await Task.sleep(for: .milliseconds(20)) }
    }

    func release() {
        let shards = locked { Array(held.keys) }
        for shard in shards {
            guard let (h, cursor) = locked({ held[shard].map { ($0, cursor(of: shard)) } }) else { continue }
            let free = WebhookLease(node: "", incarnation: "", streamCreated: node.shardStreamCreated(shard), cursor: cursor)
            if node.writeWebhookLease(free, webhook, shard: shard, after: h.last) != nil {
                log.info("webhook \(number): shard \(shard) delivered through \(cursor) and left to the other nodes")
            }
            _ = locked { held.removeValue(forKey: shard) }
        }
    }

    /// Shards delivered here, for `/metrics`.
    var shardsHeld: Int { locked { held.count } }

    // MARK: Leases

    private func leases() {
        // A node that has not listened for a whole heartbeat timeout does not know who is alive.
        let startAt = Date(timeIntervalSinceNow: node.heartbeatTimeout + 0.5)
        var failures = 0
        while true {
            do throws(ClusterNode.Failure) {
                try node.ensureWebhookLeases()
                break
            } catch {
                failures += 1
                if failures == 1 || failures % 60 == 0 { log.warn("webhook \(number): \(error); tried again", LogFields(kind: "webhook")) }
                if waitWhileRunning(until: Date(timeIntervalSinceNow: 1)) { return }
            }
        }
        if waitWhileRunning(until: startAt) { return }
        var considered = 0.0
        while true {
            // Held shards at every turn (a post may be waiting for its lease); the others once a second.
            for shard in locked({ held.keys.sorted() }) {
                if locked({ stopping }) { return }
                keep(shard)
            }
            if Self.uptime() - considered >= 1 {
                considered = Self.uptime()
                let live = node.liveNodes
                for shard in 0..<node.layout.shards where locked({ held[shard] == nil }) {
                    if locked({ stopping }) { return }
                    consider(shard, live: live)
                }
            }
            let stop = locked { () -> Bool in
                if !stopping, !held.values.contains(where: \.wanted) { _ = condition.wait(seconds: 0.5) }
                return stopping
            }
            if stop { return }
        }
    }

    /// Waits until `date`; true when stopping.
    private func waitWhileRunning(until date: Date) -> Bool {
        locked {
            while !stopping, date.timeIntervalSinceNow > 0, condition.wait(seconds: date.timeIntervalSinceNow) {}
            return stopping
        }
    }

    /// A held shard: its lease written again when its cursor moved, when a post waits for
    /// it, every second while events wait, and every few seconds anyway; lost when another
    /// node holds it.
    private func keep(_ shard: Int) {
        let now = Self.uptime()
        guard let (h, cursor) = locked({ held[shard].map { ($0, cursor(of: shard)) } }) else { return }
        let due = h.wanted || (cursor != h.written && now - h.writtenAt >= 1) || (h.hasPending && now - h.writtenAt >= 1) || now - h.writtenAt >= 5
        guard due else { return }
        let lease = WebhookLease(node: node.name, incarnation: node.incarnation, streamCreated: node.shardStreamCreated(shard), cursor: cursor)
        if let seq = node.writeWebhookLease(lease, webhook, shard: shard, after: h.last) {
            locked {
                guard held[shard]?.generation == h.generation else { return }
                held[shard]!.last = seq
                held[shard]!.written = cursor
                held[shard]!.writtenAt = now
                held[shard]!.confirmedAt = now
                held[shard]!.wanted = false
                condition.broadcast()
            }
            return
        }
        // Refused or not answered: whose it is now.
        guard let (current, last) = try? node.webhookLease(webhook, shard: shard) else { return }
        if let current, current.node == node.name, current.incarnation == node.incarnation {
            // Still this node's (the write was taken without an answer, or a record no node
            // sealed came after it): written again at the next turn, after `last`.
            locked {
                guard held[shard]?.generation == h.generation else { return }
                held[shard]!.last = last
                held[shard]!.written = current.cursor
                held[shard]!.writtenAt = 0
            }
            return
        }
        locked { if held[shard]?.generation == h.generation { held[shard] = nil } }
        log.warn("webhook \(number): shard \(shard) is delivered by \(current.map { "node '\($0.node)'" } ?? "another node") now; "
                 + "this node stops (what it had not posted of it is left to that node)")
    }

    /// A shard not held here: taken when its lease is free or its holder gone, by the node
    /// it falls to among the live ones (by any node after a while).
    private func consider(_ shard: Int, live: [String]) {
        guard let (lease, last) = try? node.webhookLease(webhook, shard: shard) else { return }
        let created = node.shardStreamCreated(shard)
        let free = lease.map { $0.node.isEmpty || node.isGone($0) || $0.streamCreated != created } ?? true
        let now = Self.uptime()
        guard free else {
            _ = locked { freeSince.removeValue(forKey: shard) }
            return
        }
        let firstSeen = locked { () -> Double in
            if freeSince[shard] == nil { freeSince[shard] = now }
            return freeSince[shard]!
        }
        let mine = live.isEmpty || live[shard % live.count] == node.name
        guard mine || now - firstSeen >= 2 * node.heartbeatTimeout else { return }
        // From the lease's cursor; a webhook new to the cluster from the shard's end now; a
        // stream made again (or a cursor no node sealed) from its start.
        let cursor: UInt64
        if let lease, lease.streamCreated == created {
            cursor = lease.cursor
        } else if lease == nil, last == 0 {
            guard let end = try? node.shardEnd(shard) else { return }
            cursor = end
        } else {
            cursor = 0
        }
        let taken = WebhookLease(node: node.name, incarnation: node.incarnation, streamCreated: created, cursor: cursor)
        let sent = Self.uptime()
        guard let seq = node.writeWebhookLease(taken, webhook, shard: shard, after: last) else { return }
        locked {
            generation += 1
            held[shard] = Held(generation: generation, last: seq, written: cursor, writtenAt: sent, read: cursor, confirmedAt: sent)
            freeSince[shard] = nil
            condition.broadcast()
        }
        let from = lease.map { $0.node.isEmpty ? "left by its last node" : "of node '\($0.node)', gone" } ?? "new"
        log.info("webhook \(number): delivering shard \(shard) from stream seq \(cursor + 1) (its lease \(from))")
    }

    /// Where `shard` is delivered through: before its first event not delivered yet, or all
    /// that was read. (`condition` locked.)
    private func cursor(of shard: Int) -> UInt64 {
        guard var h = held[shard] else { return 0 }
        let delivered = delivery.cursor
        while h.markStart < h.marks.count, h.marks[h.markStart].position <= delivered { h.markStart += 1 }
        if h.markStart > 1024 {
            h.marks.removeFirst(h.markStart)
            h.markStart = 0
        }
        held[shard] = h
        return h.markStart < h.marks.count ? h.marks[h.markStart].streamSeq - 1 : h.read
    }

    // MARK: Reading

    private func reading() {
        var readers: [Int: (generation: Int, reader: ShardEventReader)] = [:]
        while true {
            let shards = locked { () -> [(Int, Held)]? in
                if stopping { return nil }
                return held.map { ($0.key, $0.value) }.sorted { $0.0 < $1.0 }
            }
            guard let shards else { return }
            readers = readers.filter { r in shards.contains { $0.0 == r.key && $0.1.generation == r.value.generation } }
            var progressed = false
            for (shard, h) in shards {
                if readers[shard] == nil {
                    readers[shard] = (h.generation, ShardEventReader(node: node, shard: shard, after: h.read, kinds: kinds))
                }
                // Caught up: read again once this node's follower has seen more, or after a while.
                if let at = h.caughtUpAt, node.shardFollowed(shard) < readers[shard]!.reader.next, Date().timeIntervalSince1970 - at < 2 { continue }
                if read(shard, readers[shard]!.reader, generation: h.generation) { progressed = true }
            }
            if !progressed { _ = waitWhileRunning(until: Date(timeIntervalSinceNow: 0.05)) }
        }
    }

    /// Reads up to a few hundred messages of `shard` into the outbox; true when it read any.
    private func read(_ shard: Int, _ reader: ShardEventReader, generation: Int) -> Bool {
        let created = node.shardStreamCreated(shard)
        let name = Self.outboxName(shard: shard, created: created)
        var any = false
        for _ in 0..<256 {
            if locked({ pendingBytes(delivered: delivery.cursor) }) >= readAhead { return any }
            let got: (streamSeq: UInt64, events: [ShardEventReader.Event])?
            do { got = try reader.readNext() } catch {
                let failures = locked { readFailures += 1; return readFailures }
                if failures == 1 || failures % 100 == 0 { log.warn("webhook \(number): \(error) (\(failures) failed reads so far); read again", LogFields(kind: "webhook")) }
                return any
            }
            guard let got else {
                locked { if held[shard]?.generation == generation { held[shard]!.caughtUpAt = Date().timeIntervalSince1970 } }
                return any
            }
            any = true
            let tag = shard << 32 | generation
            let prepared = got.events.map { e in
                let body = e.event.encoded(position: Int(e.streamSeq), outbox: name, time: e.time, part: e.part)
                return (room: e.event.room, type: e.event.type, body: body, key: "\(name)-\(e.streamSeq)-\(e.part)", tag: tag)
            }
            let ok = locked { () -> Bool in
                guard held[shard]?.generation == generation else { return false }
                if let positions = outbox.append(prepared: prepared) {
                    for (n, position) in positions.enumerated() {
                        held[shard]!.marks.append((position, got.events[n].streamSeq))
                        pending.append((position, prepared[n].body.count))
                        pendingBytes += prepared[n].body.count
                    }
                }
                held[shard]!.read = got.streamSeq
                held[shard]!.caughtUpAt = nil
                return true
            }
            if !ok { return any }
        }
        return any
    }

    /// What the events read and not delivered weigh. (`condition` locked.)
    private func pendingBytes(delivered: Int) -> Int {
        while pendingStart < pending.count, pending[pendingStart].position <= delivered {
            pendingBytes -= pending[pendingStart].bytes
            pendingStart += 1
        }
        if pendingStart > 4096 {
            pending.removeFirst(pendingStart)
            pendingStart = 0
        }
        return pendingBytes
    }

    private func locked<T>(_ body: () -> T) -> T {
        condition.lock()
        defer { condition.unlock() }
        return body()
    }
}
