import Coordinator
import JetStream

/// Where a room lives in the engine. Room ids (`[A-Za-z0-9_-]{1,64}`) are valid in
/// stream names and subject tokens as they are.
enum EngineNames {
    /// The layout of a tabd before shards: one stream per room, whose compare-and-set
    /// sequence is the room's order.
    static let roomStreamPrefix = "TABD_ROOM_"
    static func stream(_ room: RoomID) -> String { roomStreamPrefix + room }
    static func subject(_ room: RoomID) -> String { "tabd.room.\(room)" }

    /// Shards: a room is the subject `tabd.r.SHARD.ROOM` of the shard stream `TABD_SHARD_SHARD`,
    /// ordered by a compare-and-set on that subject's last sequence (``ShardLayout``).
    static let shardStreamPrefix = "TABD_SHARD_"
    static func shardStream(_ shard: Int) -> String { shardStreamPrefix + String(shard) }
    static func shardSubject(_ shard: Int, _ room: RoomID) -> String { "tabd.r.\(shard).\(room)" }
    static func shardFilter(_ shard: Int) -> String { "tabd.r.\(shard).*" }
    /// The room a shard subject names, if it is one.
    static func room(inShardSubject subject: String) -> RoomID? {
        let parts = subject.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == "tabd", parts[1] == "r", Int(parts[2]) != nil, Limits.isRoomID(String(parts[3])) else { return nil }
        return String(parts[3])
    }
    /// The cluster's own records (its shard layout), sealed: `tabd.cluster.layout`.
    static let clusterStream = "TABD_CLUSTER"
    static let layoutSubject = "tabd.cluster.layout"
    /// The rooms of the shards, one record each (its latest snapshot): `tabd.dir.ROOM`.
    /// Listing rooms reads its subjects.
    static let directory = "TABD_DIRECTORY"
    static func directorySubject(_ room: RoomID) -> String { "tabd.dir.\(room)" }
    /// The kind of a room's tombstone: the room's life ended there.
    static let tombstoneKind = "deleted"
    /// The kind of a room's move into its shard: the last message of its stream of its own
    /// (a fence: nothing can be appended after it), and the first of its subject in the shard
    /// (a snapshot record of the room at the fence: the same life, epoch and seqs).
    static let movedKind = "moved"
    /// In a shard, the room's message each message follows (its seal covers it).
    static let followsHeader = "Tabd-Follows"
    /// Every room's latest snapshot, one message per room (its subject).
    static let snapshots = "TABD_SNAPSHOTS"
    static func snapshotSubject(_ room: RoomID) -> String { "tabd.snap.\(room)" }
    /// Heartbeats (core NATS): `tabd.node.NAME`.
    static let heartbeatPrefix = "tabd.node."
    /// A room was deleted (core NATS): `tabd.deleted.ROOM`.
    static let deletedPrefix = "tabd.deleted."

    /// Headers of a room's messages.
    static let nodeHeader = "Tabd-Node"
    /// Which life of that node wrote it (a random id per start; see ``ClusterNode/incarnation``).
    static let incarnationHeader = "Tabd-Incarnation"
    static let kindHeader = "Tabd-Kind"
    /// The forwarded commands among a message's batches: `SEQ=ID,…` (docs/CLUSTER.md).
    static let forwardsHeader = "Tabd-Forwards"
    /// Commands forwarded to a node (core NATS): `tabd.fwd.NODE`.
    static let forwardPrefix = "tabd.fwd."
    /// Their answers, to one life of the node that forwarded them: `tabd.fwdr.NODE.INCARNATION`.
    static func forwardAnswers(node: String, incarnation: String) -> String { "tabd.fwdr.\(node).\(incarnation)" }
    /// Whether `subject` is one of those: the only subjects a node answers on.
    static func isForwardReply(_ subject: String) -> Bool {
        let parts = subject.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "tabd" && parts[1] == "fwdr" && Limits.isRoomID(String(parts[2])) && Limits.isRoomID(String(parts[3]))
    }
    /// The message's seal (``EngineTrust``).
    static let sealHeader = "Tabd-Seal"
    /// On a room's first message or a `sealed` message: from here on, every message of
    /// the room is sealed. (Not `Tabd-Sealed`: libnats' header lookup of `Tabd-Seal` can
    /// return a header whose name it begins.) (docs/CLUSTER.md, "Moving a cluster to sealed messages").
    static let sealMarkHeader = "Tabd-Mark"
    /// The kind of the message that marks a room sealed, when its first message does not.
    static let sealMarkKind = "sealed"
    /// The `Tabd-Mark` value of a seal mark ("every later message must be sealed"), and of
    /// a life mark ("… sealed bound to the room's life", which is a seal mark too).
    static let sealMarkValue = "1"
    static let lifeMarkValue = "2"
    /// JetStream's own: the id a message was published with (deduplication).
    static let messageIDHeader = "Nats-Msg-Id"
}

/// What the first message of a room's stream holds: its epoch and first tabs.
struct Genesis {
    var epoch: String
    var tabs: [TabInfo]

    var bytes: [UInt8] {
        JSONValue.object([("epoch", .string(epoch)), ("tabs", .array(tabs.map(Self.json)))]).compactBytes
    }

    init(epoch: String, tabs: [TabInfo]) { self.epoch = epoch; self.tabs = tabs }

    init(bytes: [UInt8]) throws {
        let json = try JSONParser.parse(bytes)
        guard let epoch = json["epoch"]?.stringValue, let tabs = json["tabs"] else { throw WireError("not a room's first message") }
        self.epoch = epoch
        self.tabs = try TabInfo.list(from: tabs, source: "the room's first message")
    }

    static func json(_ t: TabInfo) -> JSONValue {
        .object([("id", .string(t.id)), ("title", .string(t.title)), ("icon", .string(t.icon)), ("color", .string(t.color)),
                 ("badge", t.badge.map(JSONValue.string) ?? .null)])
    }
}

/// A room's state at a stream sequence, kept in the engine so a node that has never
/// seen the room starts from it and reads only the tail.
package struct SnapshotRecord: Equatable, Sendable {
    /// The creation time of the stream it was taken from: a snapshot of a room deleted
    /// and created again (a stale one that outlived its tombstone) never fits the new one.
    package var streamCreated: Int64
    package var streamSeq: UInt64
    package var state: StoredState
    package var owners: [ClientID: String]
    /// The incarnation of each node's last message up to `streamSeq`.
    package var incarnations: [String: String] = [:]
    /// The room's seal mark is at or before `streamSeq`: every message after it must be sealed.
    package var sealed = false
    /// The room's life mark is at or before `streamSeq`: every message after it must be
    /// sealed bound to the room's life (``EngineTrust/Verdict/sealed``).
    package var lifeBound = false
    /// A room of a shard: the shard, and the stream sequence its life began at (its first
    /// message). Nil for a room with a stream of its own.
    package var shard: Int?
    package var lifeStart: UInt64?

    var bytes: [UInt8] {
        JSONValue.object([
            ("streamCreated", .number(String(streamCreated))), ("streamSeq", .number(String(streamSeq))), ("epoch", .string(state.epoch)),
            ("nextPage", .int(state.nextPage)), ("nextClient", .int(state.nextClient)),
            ("owners", .object(owners.sorted { $0.key < $1.key }.map { ($0.key, .string($0.value)) })),
            ("incarnations", .object(incarnations.sorted { $0.key < $1.key }.map { ($0.key, .string($0.value)) })),
            ("snapshot", state.snapshot.json(capped: false)),
            ("sealed", .bool(sealed)),
            ("lifeBound", .bool(lifeBound)),
        ] + (shard.map { [("shard", JSONValue.int($0))] } ?? []) + (lifeStart.map { [("lifeStart", JSONValue.number(String($0)))] } ?? [])).compactBytes
    }

    package init(streamCreated: Int64, streamSeq: UInt64, state: StoredState, owners: [ClientID: String],
                 incarnations: [String: String] = [:], sealed: Bool = false, lifeBound: Bool = false, shard: Int? = nil, lifeStart: UInt64? = nil) {
        self.streamCreated = streamCreated; self.streamSeq = streamSeq; self.state = state; self.owners = owners
        self.incarnations = incarnations; self.sealed = sealed; self.lifeBound = lifeBound; self.shard = shard; self.lifeStart = lifeStart
    }

    /// Whether it is a snapshot of this stream (`info`) that the stream's messages follow on from.
    func fits(_ info: StreamInfo) -> Bool {
        streamCreated == info.created && streamSeq + 1 >= info.firstSeq && streamSeq <= info.lastSeq
    }

    init(bytes: [UInt8]) throws {
        let json = try JSONParser.parse(bytes)
        guard let created = json["streamCreated"]?.intValue,
              let seq = json["streamSeq"]?.intValue, seq > 0, let epoch = json["epoch"]?.stringValue,
              let nextPage = json["nextPage"]?.intValue, let nextClient = json["nextClient"]?.intValue,
              let owners = json["owners"]?.objectValue, let snapshot = json["snapshot"]
        else { throw WireError("not a room snapshot") }
        let restored = StoredState(epoch: epoch, snapshot: try Snapshot(json: snapshot), nextPage: nextPage, nextClient: nextClient, history: [])
        // What a coordinator could not continue is refused here: the room is then loaded
        // from its stream's first message instead.
        if let why = restored.unrestorableReason { throw WireError("not a usable room snapshot: \(why)") }
        streamCreated = Int64(created)
        streamSeq = UInt64(seq)
        state = restored
        self.owners = Dictionary(owners.compactMap { k, v in v.stringValue.map { (k, $0) } }, uniquingKeysWith: { _, last in last })
        // A record of a tabd before incarnations has none: nodes are then judged by name.
        sealed = json["sealed"]?.boolValue ?? false
        // A record of a tabd before room lives were bound has no life mark.
        lifeBound = json["lifeBound"]?.boolValue ?? false
        shard = json["shard"]?.intValue
        lifeStart = json["lifeStart"]?.intValue.map { UInt64($0) }
        incarnations = Dictionary((json["incarnations"]?.objectValue ?? []).compactMap { k, v in v.stringValue.map { (k, $0) } },
                                  uniquingKeysWith: { _, last in last })
    }
}
