import Auth
import Coordinator
import Dispatch
import FoundationEssentials
import Glibc
import JetStream
import Locking
import Portable

/// How a cluster lays its rooms out in shards: `shards` replicated streams, and the key
/// that maps a room to one of them. Chosen by the first node of the cluster and recorded
/// (sealed) in the engine for the cluster's life: every node maps every room alike, and
/// a client cannot pile rooms into one shard by choosing their ids without the key. It is
/// not derived from the cluster secret, which rotates.
public struct ShardLayout: Equatable, Sendable {
    public let shards: Int
    package let key: [UInt8]

    /// Shards for a new cluster: several shard leaders land on each engine server.
    public static let defaultShards = 32
    public static let maxShards = 1024

    package init(shards: Int, key: [UInt8]) {
        self.shards = shards
        self.key = key
    }

    /// A new layout of `shards` with a random key.
    package static func random(shards: Int) -> ShardLayout {
        var rng = SystemRandomNumberGenerator()
        return ShardLayout(shards: shards, key: (0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) })
    }

    /// The shard of room `id`: the keyed hash of its id, modulo the shards.
    package func shard(of id: RoomID) -> Int {
        let mac = KeyedHash.sha256(key: key, message: Array(id.utf8))
        let value = mac.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return Int(value % UInt64(shards))
    }

    var bytes: [UInt8] {
        JSONValue.object([("shards", .int(shards)), ("key", .string(Hex.encode(key)))]).compactBytes
    }

    init(bytes: [UInt8]) throws {
        let json = try JSONParser.parse(bytes)
        guard let shards = json["shards"]?.intValue, shards >= 1, shards <= Self.maxShards,
              let hex = json["key"]?.stringValue, hex.utf8.count == 64 else { throw WireError("not a shard layout") }
        var key: [UInt8] = []
        var it = hex.utf8.makeIterator()
        while let hi = it.next(), let lo = it.next() {
            guard let h = Self.nibble(hi), let l = Self.nibble(lo) else { throw WireError("not a shard layout: its key is not hex") }
            key.append(h << 4 | l)
        }
        self.init(shards: shards, key: key)
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        default: nil
        }
    }
}

/// One shard's follower on this node: a single ordered consumer of every room of the shard
/// (its subjects `tabd.r.SHARD.*`), whatever number of rooms are loaded here, handing each
/// message to the rooms of its subject loaded here (in stream order, so in each room's
/// order). Rooms not loaded here pass by.
final class ShardFollower: Sendable {
    let shard: Int
    let stream: String
    private let subscription = Locked<OrderedSubscription?>(nil)
    private let listeners = Locked([RoomID: [ShardListener]]())

    /// Follows `shard` from stream sequence `start` on.
    init(client: EngineClient, shard: Int, start: UInt64, headerKeys: [String],
         report: @escaping @Sendable (OrderedSubscription.Report) -> Void) throws(EngineError) {
        self.shard = shard
        stream = EngineNames.shardStream(shard)
        let sub = try client.subscribeOrdered(stream: stream, subject: EngineNames.shardFilter(shard), startSeq: start,
                                              headerKeys: headerKeys, report: report) { [weak self] message in
            self?.deliver(message)
        }
        subscription.withLock { $0 = sub }
    }

    private func deliver(_ message: StreamMessage) {
        guard let room = EngineNames.room(inShardSubject: message.subject),
              let targets = listeners.withLock({ $0[room] }) else { return }
        for target in targets { target.deliver(message) }
    }

    /// Starts keeping room `id`'s messages from now on, for a room being loaded here.
    func listen(_ id: RoomID) -> ShardListener {
        let listener = ShardListener()
        listeners.withLock { $0[id, default: []].append(listener) }
        return listener
    }

    func stopListening(_ id: RoomID, _ listener: ShardListener) {
        listener.close()
        listeners.withLock { l in
            l[id]?.removeAll { $0 === listener }
            if l[id]?.isEmpty == true { l[id] = nil }
        }
    }

    /// The stream sequence of the last message this follower delivered.
    var lastDelivered: UInt64 { subscription.withLock { $0 }?.lastDelivered ?? 0 }

    /// Follows again from `seq` (a delivery there was not the stream's), or from after the
    /// last delivered when `seq` is nil (the consumer stalled).
    func restart(from seq: UInt64?, why: String) {
        guard let sub = subscription.withLock({ $0 }) else { return }
        if let seq { sub.restart(from: seq, why: why) } else {
            // Every room of the shard waiting here asks: the follower is made again once per stall.
            sub.restartIfStalled(for: ClusterRoomMachine.stallNanoseconds, why: why)
        }
    }

    func cancel() { subscription.withLock { $0 }?.cancel() }
}

/// A loaded room's end of its shard's follower: it keeps what comes while the room loads,
/// then hands everything to the room, in order.
final class ShardListener: Sendable {
    private enum Mode {
        case keeping([StreamMessage])
        case handing(Handler1, [StreamMessage])
        case delivering(Handler1)
        case closed
    }

    private let mode = Locked(Mode.keeping([]))

    /// A message of the room (on the follower's thread, one at a time).
    func deliver(_ message: StreamMessage) {
        let handler = mode.withLock { mode -> Handler1? in
            switch mode {
            case var .keeping(kept): kept.append(message); mode = .keeping(kept); return nil
            case .handing(let h, var more): more.append(message); mode = .handing(h, more); return nil
            case let .delivering(h): return h
            case .closed: return nil
            }
        }
        handler?.run(message)
    }

    /// From now on the room takes its messages: first those kept, in order.
    func attach(_ handler: @escaping @Sendable (StreamMessage) -> Void) {
        let h = Handler1(handler)
        var batch = mode.withLock { mode -> [StreamMessage] in
            guard case let .keeping(kept) = mode else { return [] }
            mode = .handing(h, [])
            return kept
        }
        while true {
            for message in batch { h.run(message) }
            batch = mode.withLock { mode -> [StreamMessage] in
                guard case let .handing(_, more) = mode else { return [] }
                if more.isEmpty { mode = .delivering(h); return [] }
                mode = .handing(h, [])
                return more
            }
            if batch.isEmpty { return }
        }
    }

    func close() { mode.withLock { $0 = .closed } }
}

/// A callback with an argument kept behind a lock (see ``Handler``).
final class Handler1: Sendable {
    let run: @Sendable (StreamMessage) -> Void
    init(_ run: @escaping @Sendable (StreamMessage) -> Void) { self.run = run }
}
