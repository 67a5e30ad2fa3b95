import Coordinator
import FoundationEssentials
import Glibc
import Dispatch
import JetStream
import Outbox

/// A shard's history read back as the events webhooks deliver: each message of the shard
/// stream in stream order, judged as the rooms judge it (sealed for the room's life, at
/// the place its seal names), turned into `roomCreated`, `roomDeleted`, `clientJoined`,
/// `clientLeft` and `batch` events.
///
/// It reads the stream itself (direct gets), not a consumer's inbox, so a message is where
/// the stream holds it. A room's first message seen here finds the room's life from the
/// room's record, or from its messages before it; a message whose seal says it follows a
/// room's message this reader did not see (a replica that answered past it) has the room's
/// messages in between read first. Only a sealed copy of one of the room's own messages
/// put where it says it belongs can pass, and it is the same events again (a duplicate,
/// with the same ids), never another's.
///
/// One thread at a time.
package final class ShardEventReader {
    /// One event of the shard, at the stream sequence of the message it came from and its
    /// index among that message's events (together, its identity on every node).
    package struct Event: Sendable {
        package let streamSeq: UInt64
        package let part: Int
        package let event: OutboxEvent
        /// When the engine stored the message (seconds since 1970): the same on every node.
        package let time: Double
    }

    /// The headers read: the rooms' and the time the engine stored each message.
    static let headerKeys = ClusterRoom.headerKeys + [timeHeader]
    static let timeHeader = "Nats-Time-Stamp"

    /// An RFC 3339 time as NATS writes it (`2026-12-07T17:40:01.123456789Z`), in seconds.
    package static func seconds(rfc3339 text: String) -> Double? {
        let utf8 = Array(text.utf8)
        guard utf8.count >= 20, utf8.last == UInt8(ascii: "Z") else { return nil }
        func number(_ range: Range<Int>) -> Int32? {
            guard range.upperBound <= utf8.count else { return nil }
            var n: Int32 = 0
            for c in utf8[range] {
                guard c >= 0x30, c <= 0x39 else { return nil }
                n = n * 10 + Int32(c - 0x30)
            }
            return n
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10), let hour = number(11..<13),
              let minute = number(14..<16), let second = number(17..<19) else { return nil }
        var parts = tm()
        parts.tm_year = year - 1900; parts.tm_mon = month - 1; parts.tm_mday = day
        parts.tm_hour = hour; parts.tm_min = minute; parts.tm_sec = second
        var fraction = 0.0, scale = 0.1
        if utf8[19] == UInt8(ascii: ".") {
            for c in utf8[20..<(utf8.count - 1)] {
                guard c >= 0x30, c <= 0x39 else { return nil }
                fraction += Double(c - 0x30) * scale
                scale /= 10
            }
        }
        return Double(timegm(&parts)) + fraction
    }

    /// What a room's messages up to here said.
    private struct RoomPlace {
        /// The room's message before the next one (nil: not known yet, at the first one
        /// seen; that one's place is then read back).
        var previous: UInt64?
        /// The room's life (nil after its tombstone, before a first message).
        var life: String?
        /// The room's last seq, when known (a deleted room's event names it).
        var lastSeq: Int?
    }

    /// Rooms whose place is kept between their messages.
    static let roomsKept = 65_536

    package let shard: Int
    private let node: ClusterNode
    private let stream: String
    private let kinds: OutboxKinds
    private var rooms: [RoomID: RoomPlace] = [:]
    /// The next stream sequence to read.
    package private(set) var next: UInt64

    /// Reads `shard` after stream sequence `cursor`, keeping events of `kinds`.
    package init(node: ClusterNode, shard: Int, after cursor: UInt64, kinds: OutboxKinds) {
        self.node = node
        self.shard = shard
        stream = EngineNames.shardStream(shard)
        self.kinds = kinds
        next = cursor + 1
    }

    /// The next message's events (none for a message that makes none); nil when the stream
    /// holds nothing after the last read yet.
    package func readNext() throws(ClusterNode.Failure) -> (streamSeq: UInt64, events: [Event])? {
        let message: StreamMessage?
        do { message = try node.client.nextMessage(stream: stream, subject: EngineNames.shardFilter(shard), from: next, headerKeys: Self.headerKeys) } catch {
            throw ClusterNode.Failure("shard \(shard): cannot read from \(next): \(error)", mayPass: true)
        }
        guard let message else { return nil }
        next = message.streamSeq + 1
        guard let room = EngineNames.room(inShardSubject: message.subject) else { return (message.streamSeq, []) }
        var place: RoomPlace
        if let known = rooms[room] { place = known } else { place = try firstSight(room, before: message) }
        var out: [Event] = []
        let subject = EngineNames.shardSubject(shard, room)
        // A message that follows one of the room's this reader has not seen: those first.
        if let previous = place.previous, let life = Self.life(of: message) ?? place.life {
            let (verdict, follows) = node.trust.judgeShard(seal: message.headers[EngineNames.sealHeader], subject: subject, life: life,
                                                           headers: message.headers, body: message.data)
            if verdict == .sealed, let follows, follows > previous, follows < message.streamSeq {
                for skipped in try read(room, after: previous, before: message.streamSeq) { out += judge(skipped, room, &place) }
            }
        }
        out += judge(message, room, &place)
        // A deleted room is seen again from its next first message; past a bound, rooms are
        // forgotten (and read again from their records when they next write).
        if place.life == nil { rooms[room] = nil } else { rooms[room] = place }
        if rooms.count > Self.roomsKept { rooms = [:] }
        return (message.streamSeq, out)
    }

    /// The life a message of the room would be sealed for: its own for a first message.
    private static func life(of message: StreamMessage) -> String? {
        switch message.headers[EngineNames.kindHeader] {
        case "genesis"?, EngineNames.movedKind?: ClusterRoom.lifeStarted(by: message)
        default: nil
        }
    }

    /// The events of one of `room`'s messages, if it is believed; the room's place moves
    /// past it either way (the stream holds it there).
    private func judge(_ message: StreamMessage, _ room: RoomID, _ place: inout RoomPlace) -> [Event] {
        let previous = place.previous
        place.previous = message.streamSeq
        let kind = message.headers[EngineNames.kindHeader]
        guard let life = Self.life(of: message) ?? place.life else {
            node.rejected("webhook", "room '\(room)': stream message \(message.streamSeq) of shard \(shard) is of no life of the room: not delivered")
            return []
        }
        let subject = EngineNames.shardSubject(shard, room)
        let (verdict, follows) = node.trust.judgeShard(seal: message.headers[EngineNames.sealHeader], subject: subject, life: life,
                                                       headers: message.headers, body: message.data)
        let atPlace: Bool = if let follows, verdict == .sealed {
            if let previous { follows == previous } else { node.isAtPlace(message, follows: follows, of: room) }
        } else { false }
        guard atPlace else {
            node.rejected("webhook", "room '\(room)': stream message \(message.streamSeq) of shard \(shard) is not sealed for its place: not delivered")
            return []
        }
        var events: [OutboxEvent] = []
        switch kind {
        case "genesis"?:
            place.life = life
            place.lastSeq = 0
            if kinds.contains(.roomCreated) { events.append(.roomCreated(room, epoch: life)) }
        case EngineNames.movedKind?:
            // A room moved in from a stream of its own: the same life goes on.
            place.life = life
            place.lastSeq = (try? SnapshotRecord(bytes: message.data))?.state.snapshot.seq
        case EngineNames.tombstoneKind?:
            place.life = nil
            if kinds.contains(.roomDeleted) { events.append(.roomDeleted(room, epoch: life, seq: place.lastSeq)) }
        case EngineNames.sealMarkKind?:
            break
        default:
            // A message of fences only has no body.
            guard !message.data.isEmpty else { break }
            guard let batches = ClusterRoomMachine.batches(in: message.data) else {
                node.rejected("webhook", "room '\(room)': stream message \(message.streamSeq) of shard \(shard) is not a batch: not delivered")
                return []
            }
            for batch in batches {
                events += OutboxEvent.of(batch, room: room, epoch: life, kinds: kinds)
                place.lastSeq = batch.lastSeq
            }
        }
        let time = message.headers[Self.timeHeader].flatMap(Self.seconds(rfc3339:)) ?? Date().timeIntervalSince1970
        return events.enumerated().map { Event(streamSeq: message.streamSeq, part: $0.offset, event: $0.element, time: time) }
    }

    /// What this reader knows of `room` before `message`, its first message seen here:
    /// the room's life from its record (when the record is of the life the message is
    /// sealed for), else from the room's messages before it, read back.
    private func firstSight(_ room: RoomID, before message: StreamMessage) throws(ClusterNode.Failure) -> RoomPlace {
        if Self.life(of: message) != nil { return RoomPlace(previous: nil, life: nil, lastSeq: nil) }
        let subject = EngineNames.shardSubject(shard, room)
        if let record = node.directoryRecord(room), record.shard == shard, record.streamCreated == node.shardCreated(shard),
           record.streamSeq < message.streamSeq, let start = record.lifeStart, start < message.streamSeq {
            let (verdict, _) = node.trust.judgeShard(seal: message.headers[EngineNames.sealHeader], subject: subject, life: record.state.epoch,
                                                     headers: message.headers, body: message.data)
            if verdict == .sealed { return RoomPlace(previous: nil, life: record.state.epoch, lastSeq: nil) }
        }
        // The room's messages before this one, judged as they come (their events were
        // delivered already): where the room stands.
        var place = RoomPlace(previous: nil, life: nil, lastSeq: nil)
        for earlier in try read(room, after: 0, before: message.streamSeq) { _ = judge(earlier, room, &place) }
        place.previous = nil
        return place
    }

    /// `room`'s messages after stream sequence `after` and before `before`, in order.
    private func read(_ room: RoomID, after: UInt64, before: UInt64) throws(ClusterNode.Failure) -> [StreamMessage] {
        let subject = EngineNames.shardSubject(shard, room)
        var out: [StreamMessage] = []
        var from = after + 1
        while from < before {
            let found: StreamMessage?
            do { found = try node.client.nextMessage(stream: stream, subject: subject, from: from, headerKeys: Self.headerKeys) } catch {
                throw ClusterNode.Failure("room '\(room)': cannot read its messages from \(from): \(error)", mayPass: true)
            }
            guard let found, found.streamSeq < before else { break }
            out.append(found)
            from = found.streamSeq + 1
        }
        return out
    }
}
