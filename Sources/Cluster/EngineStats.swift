import Locking

/// What a node measures of its engine, for `/metrics`: the round trip of each publish
/// (a histogram), and how often another node's batch got ahead of this node's.
public final class EngineStats: Sendable {
    /// Upper bounds of the round-trip histogram, in seconds.
    static let bounds: [Double] = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5]

    private struct State {
        var buckets = [Int](repeating: 0, count: EngineStats.bounds.count)
        var count = 0
        var sum = 0.0
        var conflicts = 0
        var retries = 0
        var refollowed = 0
        var batches = 0
        var forwarded = 0
        var forwardsReceived = 0
        var forwardsDecidedHere = 0
        var rejected: [String: Int] = [:]
    }

    /// The kinds of engine message a node rejects (``rejected(_:)``), as `/metrics` lists them.
    static let rejectionKinds = ["batch", "snapshot", "forward", "answer", "heartbeat", "deletion", "ack", "delivery", "webhook"]
    private let state = Locked(State())

    /// A message's publish came back after `seconds`; it carried `batches` batches.
    func published(seconds: Double, batches: Int = 1) {
        state.withLock { s in
            s.count += 1
            s.batches += batches
            s.sum += seconds
            if let i = Self.bounds.firstIndex(where: { seconds <= $0 }) { s.buckets[i] += 1 }
        }
    }

    func conflict() { state.withLock { $0.conflicts += 1 } }
    func retried() { state.withLock { $0.retries += 1 } }
    func refollowed() { state.withLock { $0.refollowed += 1 } }
    func forwarded(_ n: Int) { state.withLock { $0.forwarded += n } }
    /// Another node forwarded this one a command.
    package func forwardReceived() { state.withLock { $0.forwardsReceived += 1 } }
    /// A command this node forwarded was not answered in time (or refused): decided here.
    package func forwardDecidedHere() { state.withLock { $0.forwardsDecidedHere += 1 } }

    /// An engine message of `kind` was not believed (unsealed, forged, moved or replayed).
    package func rejected(_ kind: String) { state.withLock { $0.rejected[kind, default: 0] += 1 } }

    /// How many engine messages of `kind` were rejected.
    package func rejections(_ kind: String) -> Int { state.withLock { $0.rejected[kind] ?? 0 } }

    /// Prometheus text for `node`.
    func render(node: String, connected: Bool) -> String {
        let s = state.withLock { $0 }
        var out = """
        # HELP tabd_node_info This node of a cluster.
        # TYPE tabd_node_info gauge
        tabd_node_info{node="\(node)"} 1
        # HELP tabd_engine_connected Whether the engine (NATS JetStream) is reachable.
        # TYPE tabd_engine_connected gauge
        tabd_engine_connected \(connected ? 1 : 0)
        # HELP tabd_engine_conflicts_total Batches another node's batch got ahead of: decided again.
        # TYPE tabd_engine_conflicts_total counter
        tabd_engine_conflicts_total \(s.conflicts)
        # HELP tabd_engine_retries_total Publishes sent again after no answer or a refusal.
        # TYPE tabd_engine_retries_total counter
        tabd_engine_retries_total \(s.retries)
        # HELP tabd_engine_consumers_replaced_total Room consumers replaced after delivering nothing while batches waited.
        # TYPE tabd_engine_consumers_replaced_total counter
        tabd_engine_consumers_replaced_total \(s.refollowed)
        # HELP tabd_engine_batches_published_total Batches carried by the messages published (group commit: several per message).
        # TYPE tabd_engine_batches_published_total counter
        tabd_engine_batches_published_total \(s.batches)
        # HELP tabd_forwarded_total Commands of this node's clients forwarded to the room's writer.
        # TYPE tabd_forwarded_total counter
        tabd_forwarded_total \(s.forwarded)
        # HELP tabd_forwards_received_total Commands other nodes forwarded to this one.
        # TYPE tabd_forwards_received_total counter
        tabd_forwards_received_total \(s.forwardsReceived)
        # HELP tabd_forwards_decided_here_total Forwarded commands not answered in time (or refused), decided by this node instead.
        # TYPE tabd_forwards_decided_here_total counter
        tabd_forwards_decided_here_total \(s.forwardsDecidedHere)
        # HELP tabd_engine_rejected_total Engine messages not believed: without a valid seal, moved, replayed or stale (by kind).
        # TYPE tabd_engine_rejected_total counter
        \(Self.rejectionKinds.map { "tabd_engine_rejected_total{kind=\"\($0)\"} \(s.rejected[$0] ?? 0)" }.joined(separator: "\n"))
        # HELP tabd_engine_publish_seconds Round trip of a message's publish to the engine's answer (messages of a room are pipelined).
        # TYPE tabd_engine_publish_seconds histogram

        """
        var cumulative = 0
        for (bound, n) in zip(Self.bounds, s.buckets) {
            cumulative += n
            out += "tabd_engine_publish_seconds_bucket{le=\"\(bound)\"} \(cumulative)\n"
        }
        out += "tabd_engine_publish_seconds_bucket{le=\"+Inf\"} \(s.count)\n"
        out += "tabd_engine_publish_seconds_sum \(s.sum)\ntabd_engine_publish_seconds_count \(s.count)\n"
        return out
    }
}

/// Engine messages a node did not believe: each counted (``EngineStats``), and logged at
/// most once per kind every ``interval`` seconds, with how many went unlogged since. A
/// consumer made again after a server restart delivers thousands of messages again; a
/// line for each would flood the log (and a log that cannot keep up slows every thread
/// that writes to it).
final class RejectionLog: Sendable {
    static let interval = 10.0

    private let stats: EngineStats
    private let log: @Sendable (String) -> Void
    private let kinds = Locked([String: (unlogged: Int, loggedAt: Double?)]())

    init(stats: EngineStats, log: @escaping @Sendable (String) -> Void) {
        self.stats = stats
        self.log = log
    }

    func rejected(_ kind: String, _ why: String, now: Double = ClusterNode.now()) {
        stats.rejected(kind)
        let line = kinds.withLock { kinds -> String? in
            var entry = kinds[kind] ?? (0, nil)
            defer { kinds[kind] = entry }
            if let at = entry.loggedAt, now - at < Self.interval {
                entry.unlogged += 1
                return nil
            }
            let more = entry.unlogged
            entry = (0, now)
            return "rejected an engine message (\(kind)): \(why)" + (more > 0 ? " (and \(more) more since the last such line)" : "")
        }
        if let line { log(line) }
    }
}
