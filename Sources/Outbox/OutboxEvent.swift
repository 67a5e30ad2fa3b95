import FoundationEssentials
import Glibc
import Dispatch
import Portable
import TabdProtocol

/// The kinds of event the outbox keeps (`--webhook-events`): what webhooks deliver and
/// `GET /api/events` streams.
public struct OutboxKinds: OptionSet, Sendable, Hashable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let roomCreated = OutboxKinds(rawValue: 1 << 0)
    public static let roomDeleted = OutboxKinds(rawValue: 1 << 1)
    public static let clientJoined = OutboxKinds(rawValue: 1 << 2)
    public static let clientLeft = OutboxKinds(rawValue: 1 << 3)
    /// Every batch of every room, as its `events` frame.
    public static let batch = OutboxKinds(rawValue: 1 << 4)

    public static let `default`: OutboxKinds = [.roomCreated, .roomDeleted, .clientJoined, .clientLeft]
    public static let names: [(String, OutboxKinds)] = [
        ("roomCreated", .roomCreated), ("roomDeleted", .roomDeleted), ("clientJoined", .clientJoined),
        ("clientLeft", .clientLeft), ("batch", .batch),
    ]

    /// A comma-separated list of names (`roomCreated,batch`); nil names the unknown one.
    public static func parse(_ list: String) -> Result<OutboxKinds, ParseError> {
        var kinds: OutboxKinds = []
        for name in list.split(separator: ",", omittingEmptySubsequences: false).map({ $0.trimmingWhitespace }) {
            guard let kind = names.first(where: { $0.0 == name })?.1 else { return .failure(ParseError(name: name)) }
            kinds.insert(kind)
        }
        return .success(kinds)
    }

    public struct ParseError: Error, Sendable {
        public let name: String
    }
}

/// One event on its way into the outbox: its type, room and fields; its position (and the
/// time it was written) are given when it is written (``encoded(position:outbox:time:)``).
public struct OutboxEvent: Sendable, Equatable {
    public let type: String
    public let room: RoomID
    public let epoch: String
    /// The room's seq it speaks of (a batch's last; nil for a deleted room).
    public let seq: Int?
    /// The fields after the common ones, in order.
    public let fields: [(String, JSONValue)]

    public static func == (a: OutboxEvent, b: OutboxEvent) -> Bool {
        a.type == b.type && a.room == b.room && a.epoch == b.epoch && a.seq == b.seq
            && a.fields.map(\.0) == b.fields.map(\.0) && a.fields.map(\.1) == b.fields.map(\.1)
    }

    public init(type: String, room: RoomID, epoch: String, seq: Int?, fields: [(String, JSONValue)] = []) {
        self.type = type; self.room = room; self.epoch = epoch; self.seq = seq; self.fields = fields
    }

    /// A room that was created (its history begins at `seq`, 0 for a new one).
    public static func roomCreated(_ room: RoomID, epoch: String, seq: Int = 0) -> OutboxEvent {
        OutboxEvent(type: "roomCreated", room: room, epoch: epoch, seq: seq)
    }

    /// A room that was deleted, with the last seq it had.
    public static func roomDeleted(_ room: RoomID, epoch: String, seq: Int?) -> OutboxEvent {
        OutboxEvent(type: "roomDeleted", room: room, epoch: epoch, seq: seq)
    }

    /// The outbox's events of one batch of `room`, in order: a `clientJoined` or
    /// `clientLeft` for each such event of the batch (at its seq), then the batch itself.
    /// A counted room lists no one: its joins and leaves are in its `batch`es' counts.
    public static func of(_ batch: EventBatch, room: RoomID, epoch: String, kinds: OutboxKinds) -> [OutboxEvent] {
        var out: [OutboxEvent] = []
        if !kinds.isDisjoint(with: [.clientJoined, .clientLeft]) {
            for e in batch.events {
                switch e.event {
                case let .clientJoined(client) where kinds.contains(.clientJoined):
                    out.append(OutboxEvent(type: "clientJoined", room: room, epoch: epoch, seq: e.seq, fields: [("client", client.json)]))
                case let .clientLeft(client) where kinds.contains(.clientLeft):
                    out.append(OutboxEvent(type: "clientLeft", room: room, epoch: epoch, seq: e.seq,
                                           fields: [("client", .object([("id", .string(client))]))]))
                default:
                    break
                }
            }
        }
        if kinds.contains(.batch) {
            out.append(OutboxEvent(type: "batch", room: room, epoch: epoch, seq: batch.lastSeq, fields: [
                ("by", .string(batch.by)), ("ref", batch.ref.map { .string($0) } ?? .null),
                ("events", .array(batch.events.map(\.json))),
            ]))
        }
        return out
    }

    /// The event's JSON as it is stored, streamed and posted:
    /// `{"type","position","outbox","room","epoch","seq","time",…}`.
    /// A cluster's event also has its `part`: its index among the events of the engine
    /// message at `position`.
    public func encoded(position: Int, outbox: String, time: Double, part: Int? = nil) -> [UInt8] {
        var members: [(String, JSONValue)] = [("type", .string(type)), ("position", .int(position))]
        if let part { members.append(("part", .int(part))) }
        members += [("outbox", .string(outbox)), ("room", .string(room)), ("epoch", .string(epoch))]
        if let seq { members.append(("seq", .int(seq))) }
        members.append(("time", .string(Self.timestamp(time))))
        return JSONValue.object(members + fields).compactBytes
    }

    /// The `gap` event: positions `from` through `through` were dropped from the outbox
    /// (past `--webhook-outbox-bytes`) before this reader got them.
    public static func gap(from: Int, through: Int, outbox: String, time: Double) -> [UInt8] {
        JSONValue.object([
            ("type", .string("gap")), ("outbox", .string(outbox)), ("from", .int(from)), ("through", .int(through)),
            ("dropped", .int(through - from + 1)), ("time", .string(timestamp(time))),
        ]).compactBytes
    }

    /// RFC 3339 in UTC with milliseconds: `2026-12-07T13:50:00.123Z`.
    public static func timestamp(_ seconds: Double) -> String {
        var t = time_t(seconds.rounded(.down))
        var parts = tm()
        gmtime_r(&t, &parts)
        let ms = Int((seconds - seconds.rounded(.down)) * 1000)
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        let millis = ms < 10 ? "00\(ms)" : ms < 100 ? "0\(ms)" : "\(ms)"
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)).\(millis)Z"
    }
}
