import Coordinator
import JetStream

/// Which node delivers one shard's events to one webhook, and how far it has delivered:
/// one record per webhook and shard in the engine (`tabd.hook.WEBHOOK.SHARD` of the stream
/// `TABD_WEBHOOKS`), sealed by the node that wrote it, and written only by a
/// compare-and-set on the record before it. The node that holds it delivers; another takes
/// it over (from its cursor) once the holder's heartbeats stop, and the holder learns it
/// lost it when its next write is refused.
package struct WebhookLease: Equatable, Sendable {
    /// The node that delivers, and which life of it.
    package var node: String
    package var incarnation: String
    /// The shard stream it speaks of, by creation time (a stream made again starts over).
    package var streamCreated: Int64
    /// Every message of the shard through this stream sequence is delivered.
    package var cursor: UInt64

    package init(node: String, incarnation: String, streamCreated: Int64, cursor: UInt64) {
        self.node = node; self.incarnation = incarnation; self.streamCreated = streamCreated; self.cursor = cursor
    }

    var bytes: [UInt8] {
        JSONValue.object([("node", .string(node)), ("incarnation", .string(incarnation)),
                          ("streamCreated", .number(String(streamCreated))), ("cursor", .number(String(cursor)))]).compactBytes
    }

    init(bytes: [UInt8]) throws {
        let json = try JSONParser.parse(bytes)
        guard let node = json["node"]?.stringValue, let incarnation = json["incarnation"]?.stringValue,
              case let .number(created)? = json["streamCreated"], let streamCreated = Int64(created),
              case let .number(text)? = json["cursor"], let cursor = UInt64(text) else { throw WireError("not a webhook delivery record") }
        self.init(node: node, incarnation: incarnation, streamCreated: streamCreated, cursor: cursor)
    }

    /// The stream that holds the records.
    static let stream = "TABD_WEBHOOKS"
    /// Records kept per webhook and shard: the newest sealed one counts, so a writer of the
    /// engine that is not a node must push out this many to make the cursor unknown.
    static let kept: Int64 = 16

    static func subject(webhook: String, shard: Int) -> String { "tabd.hook.\(webhook).\(shard)" }
}

extension ClusterNode {
    /// What the engine says of `webhook`'s delivery of `shard`: the newest record sealed by
    /// a node (nil: none), and the stream sequence of the subject's last message (what the
    /// next write expects, whoever wrote it).
    package func webhookLease(_ webhook: String, shard: Int) throws(Failure) -> (lease: WebhookLease?, last: UInt64) {
        let subject = WebhookLease.subject(webhook: webhook, shard: shard)
        do {
            guard let last = try client.lastMessage(stream: WebhookLease.stream, subject: subject, headerKeys: [EngineNames.sealHeader]) else { return (nil, 0) }
            if let lease = judgeLease(last, subject: subject) { return (lease, last.streamSeq) }
            // The last one is not a node's: the newest that is.
            var newest: WebhookLease?
            var from: UInt64 = 1
            while from < last.streamSeq,
                  let message = try client.nextMessage(stream: WebhookLease.stream, subject: subject, from: from, headerKeys: [EngineNames.sealHeader]),
                  message.streamSeq < last.streamSeq {
                if let lease = judgeLease(message, subject: subject) { newest = lease }
                from = message.streamSeq + 1
            }
            rejected("webhook", "the last delivery record of shard \(shard) for a webhook is not sealed by a node: "
                     + (newest.map { "the one before it counts (cursor \($0.cursor))" } ?? "none before it is, so its delivery starts over"))
            return (newest, last.streamSeq)
        } catch {
            throw Failure("cannot read the webhook delivery record of shard \(shard): \(error)", mayPass: true)
        }
    }

    /// Makes the stream of the leases, if no node has yet.
    package func ensureWebhookLeases() throws(Failure) {
        do {
            _ = try client.ensureStream(name: WebhookLease.stream, subjects: ["tabd.hook.>"], replicas: replicas,
                                        maxPerSubject: WebhookLease.kept, allowDirect: true)
        } catch { throw Failure("cannot make the stream of the webhook leases: \(error)", mayPass: true) }
    }

    private func judgeLease(_ message: StreamMessage, subject: String) -> WebhookLease? {
        guard trust.judgeHook(seal: message.headers[EngineNames.sealHeader], subject: subject, body: message.data) == .sealed else { return nil }
        return try? WebhookLease(bytes: message.data)
    }

    /// Writes `lease` as `webhook`'s record of `shard`, if the subject still ends at `after`;
    /// its new last sequence, or nil when another write came first (or the engine did not
    /// answer: the caller reads the record again).
    package func writeWebhookLease(_ lease: WebhookLease, _ webhook: String, shard: Int, after: UInt64) -> UInt64? {
        let subject = WebhookLease.subject(webhook: webhook, shard: shard)
        let body = lease.bytes
        switch client.publish(subject: subject, data: body, headers: [(EngineNames.sealHeader, trust.sealHook(subject: subject, body: body))],
                              expectedLastSeq: after, perSubject: true) {
        case let .stored(seq, _): return seq
        case .wrongLastSequence, .unknown, .failed: return nil
        }
    }

    /// Whether the node a lease names is gone: not heard within the timeout, or another
    /// life of it (this node started again under its name is one).
    package func isGone(_ lease: WebhookLease) -> Bool {
        if lease.node == name { return lease.incarnation != incarnation }
        return !isAlive(lease.node, incarnation: lease.incarnation)
    }

    /// The nodes heard within the timeout, and this one, by name.
    package var liveNodes: [String] {
        let now = Self.now()
        var names = Set(heardTimes().filter { now - $0.value < heartbeatTimeout }.keys)
        names.insert(name)
        return names.sorted()
    }

    /// The room's directory record (its latest snapshot), when a node sealed it.
    func directoryRecord(_ room: RoomID) -> SnapshotRecord? {
        let subject = EngineNames.directorySubject(room)
        guard let message = try? client.lastMessage(stream: EngineNames.directory, subject: subject, headerKeys: [EngineNames.sealHeader]),
              !message.data.isEmpty,
              trust.judgeSnapshot(seal: message.headers[EngineNames.sealHeader], subject: subject, body: message.data) == .sealed else { return nil }
        return try? SnapshotRecord(bytes: message.data)
    }

    /// The last stream sequence of `shard`'s stream (0: empty).
    package func shardEnd(_ shard: Int) throws(Failure) -> UInt64 {
        do { return try client.streamInfo(EngineNames.shardStream(shard))?.lastSeq ?? 0 } catch {
            throw Failure("cannot read shard \(shard): \(error)", mayPass: true)
        }
    }

    /// The stream sequence of the last message of `shard` this node's follower delivered.
    package func shardFollowed(_ shard: Int) -> UInt64 { follower(of: shard).lastDelivered }

    /// The creation time of `shard`'s stream, for the webhook records and event ids.
    package func shardStreamCreated(_ shard: Int) -> Int64 { shardCreated(shard) }
}
