import Auth
import FoundationEssentials
import Glibc
import Dispatch
import Portable

/// What a node believes of the engine: nothing it cannot check. Every message a node
/// writes to the engine is sealed with the cluster's secret (``ClusterSecret``) over
/// everything its receiver acts on; what does not open is not folded, applied, answered
/// or believed (docs/CLUSTER.md, "The engine is not trusted").
public struct EngineTrust: Sendable {
    /// The keys the nodes share (`--cluster-secret-file`).
    public let secret: ClusterSecret
    /// Phase one of moving a cluster to sealed messages (`--cluster-unsigned accept`):
    /// this node seals everything but also takes unsealed messages, from nodes of a tabd
    /// that does not seal. Off (the default), an unsealed message is rejected like a forged
    /// one, except in a room's history before its ``ClusterRoomMachine`` seal mark.
    public let acceptUnsigned: Bool

    /// How far apart the nodes' clocks may be: a heartbeat, forward, answer or deletion
    /// notice is believed only within the liveness bound plus this of its time.
    public static let clockSkewSeconds = 2.0

    public init(secret: ClusterSecret, acceptUnsigned: Bool = false) {
        self.secret = secret
        self.acceptUnsigned = acceptUnsigned
    }

    /// What a message's seal says of it.
    package enum Verdict: Equatable, Sendable {
        /// Sealed by a node of this cluster, for this place (and, for a room's stream
        /// message, this life of the room).
        case sealed
        /// A room's stream message sealed by a node of this cluster for this place with the
        /// seal of a build before room lives were bound (`v1`): it may come from an earlier
        /// life of the room, so it is believed only in a room's history before its life
        /// mark, as unsealed messages are before its seal mark.
        case sealedUnbound
        /// No seal at all (a node of a tabd that does not seal, or anyone).
        case unsigned
        /// A seal that does not open: forged, altered, moved or replayed elsewhere.
        case forged

        /// Sealed by a node of this cluster, with either version.
        package var isNodeSeal: Bool { self == .sealed || self == .sealedUnbound }
    }

    // MARK: Core messages (heartbeats, forwards, answers, deletion notices)

    /// A core message's body: `SEAL TIME ARG…` on its first line (TIME in milliseconds
    /// since 1970; ARGs without spaces or line feeds), the payload after it. The seal
    /// covers the subject, the time, the arguments and the payload.
    package func sealCore(_ purpose: ClusterSecret.Purpose, subject: String, args: [String] = [], payload: [UInt8] = [],
                          now: Double = Date().timeIntervalSince1970) -> [UInt8] {
        let time = String(Int64(now * 1000))
        let seal = secret.seal(purpose, fields: [subject, time] + args, body: payload)
        return Array(([seal, time] + args).joined(separator: " ").utf8) + [0x0A] + payload
    }

    /// A core message opened.
    package struct Opened: Equatable, Sendable {
        /// Seconds since 1970 (nil for an unsealed message).
        package var time: Double?
        package var args: [String]
        package var payload: [UInt8]
    }

    /// What a core message is: `.sealed` with its contents when its seal opens for
    /// `subject` and `purpose` and it is recent (its time within `lifetime` plus the
    /// clock-skew bound of `now`); an unsealed message's `.unsigned`, with its whole body
    /// as the payload (the caller takes it only in phase one); else `.forged`.
    package func openCore(_ purpose: ClusterSecret.Purpose, subject: String, data: [UInt8], lifetime: Double,
                          now: Double = Date().timeIntervalSince1970) -> (Verdict, Opened?, why: String) {
        guard data.starts(with: Array("\(ClusterSecret.version).".utf8)) else {
            return (.unsigned, Opened(time: nil, args: [], payload: data), "not sealed")
        }
        let end = data.firstIndex(of: 0x0A) ?? data.endIndex
        let head = String(decoding: data[..<end], as: UTF8.self).split(separator: " ", omittingEmptySubsequences: false).map(String.init)
        let payload = end < data.endIndex ? Array(data[(end + 1)...]) : []
        guard head.count >= 2, let ms = Int64(head[1]) else { return (.forged, nil, "a malformed seal line") }
        let args = Array(head.dropFirst(2))
        guard secret.opens(head[0], purpose, fields: [subject, head[1]] + args, body: payload) else {
            return (.forged, nil, "a seal that does not open")
        }
        let time = Double(ms) / 1000
        guard now - time <= lifetime + Self.clockSkewSeconds else {
            return (.forged, nil, "sealed \(fixedDecimals(now - time, 1)) s ago: older than \(fixedDecimals(lifetime, 0)) s plus the clock-skew bound (a replay, or clocks apart)")
        }
        guard time - now <= Self.clockSkewSeconds else {
            return (.forged, nil, "sealed \(fixedDecimals(time - now, 1)) s in the future: the nodes' clocks are further apart than \(fixedDecimals(Self.clockSkewSeconds, 0)) s")
        }
        return (.sealed, Opened(time: time, args: args, payload: payload), "")
    }

    // MARK: A room's stream

    /// The fields a stream message's seal covers: its subject (so its room), kind, the
    /// stream sequence it follows (its place), writer and that writer's life, its id, the
    /// forwarded commands it carries and whether it marks the room sealed.
    static func streamFields(subject: String, kind: String?, follows: UInt64, node: String?, incarnation: String?,
                             messageID: String?, forwards: String?, sealMark: String?) -> [String] {
        [subject, kind ?? "", String(follows), node ?? "", incarnation ?? "", messageID ?? "", forwards ?? "", sealMark ?? ""]
    }

    /// The fields of a life-bound (`v2`) seal: the room's life (its epoch) besides the `v1`
    /// fields, each optional one as `-` when absent and `+` and its value when present (so
    /// an absent header and an empty one differ), and the place as `*` for a message that
    /// holds at any place (a life mark: moving it only makes the room stricter).
    static func lifeBoundFields(subject: String, life: String, kind: String?, follows: UInt64?, node: String?, incarnation: String?,
                                messageID: String?, forwards: String?, sealMark: String?) -> [String] {
        func optional(_ value: String?) -> String { value.map { "+" + $0 } ?? "-" }
        return [subject, life, optional(kind), follows.map(String.init) ?? "*", optional(node), optional(incarnation),
                optional(messageID), optional(forwards), optional(sealMark)]
    }

    /// Whether this node seals a room's stream messages bound to the room's life (`v2`):
    /// not in phase one of a move (``acceptUnsigned``), where nodes of an earlier build,
    /// which read only `v1`, may still be running — unless the room has its life mark
    /// (then a node of phase two has written, so every node reads `v2`, and a `v1` seal
    /// would be passed over).
    func sealsLives(roomBound: Bool = false) -> Bool { !acceptUnsigned || roomBound }

    /// The seal of a stream message of the room's life `life` (its epoch), at the place
    /// after `follows` (nil: any place, for a life mark only): `v2` when `bound`, else `v1`
    /// (see ``streamFields(subject:kind:follows:node:incarnation:messageID:forwards:sealMark:)``).
    func sealStream(subject: String, life: String, bound: Bool, kind: String?, follows: UInt64?, node: String, incarnation: String,
                    messageID: String?, forwards: String?, sealMark: String?, body: [UInt8]) -> String {
        guard bound else {
            return secret.seal(.batch, fields: Self.streamFields(subject: subject, kind: kind, follows: follows ?? 0, node: node, incarnation: incarnation,
                                                                 messageID: messageID, forwards: forwards, sealMark: sealMark), body: body)
        }
        return secret.seal(.batch, fields: Self.lifeBoundFields(subject: subject, life: life, kind: kind, follows: follows, node: node,
                                                                incarnation: incarnation, messageID: messageID, forwards: forwards,
                                                                sealMark: sealMark),
                           body: body, version: ClusterSecret.lifeBoundVersion)
    }

    /// What a delivered stream message is (its seal header `seal`, at stream sequence `seq`,
    /// in the room's life `life`). A stream has no message at 0: one said to be there was
    /// not delivered by the engine. A life mark's `v2` seal holds at any place.
    func judgeStream(seal: String?, subject: String, life: String, seq: UInt64, headers: [String: String], body: [UInt8]) -> Verdict {
        guard seq > 0 else { return .forged }
        guard let seal else { return .unsigned }
        let kind = headers[EngineNames.kindHeader], node = headers[EngineNames.nodeHeader], incarnation = headers[EngineNames.incarnationHeader]
        let messageID = headers[EngineNames.messageIDHeader], forwards = headers[EngineNames.forwardsHeader]
        let sealMark = headers[EngineNames.sealMarkHeader]
        switch secret.version(of: seal) {
        case ClusterSecret.lifeBoundVersion?:
            let follows: UInt64? = kind == EngineNames.sealMarkKind ? nil : seq - 1
            let fields = Self.lifeBoundFields(subject: subject, life: life, kind: kind, follows: follows, node: node, incarnation: incarnation,
                                              messageID: messageID, forwards: forwards, sealMark: sealMark)
            return secret.opens(seal, .batch, fields: fields, body: body, version: ClusterSecret.lifeBoundVersion) ? .sealed : .forged
        case ClusterSecret.version?:
            let fields = Self.streamFields(subject: subject, kind: kind, follows: seq - 1, node: node, incarnation: incarnation,
                                           messageID: messageID, forwards: forwards, sealMark: sealMark)
            return secret.opens(seal, .batch, fields: fields, body: body) ? .sealedUnbound : .forged
        default:
            return .forged
        }
    }

    /// What a message of a room in a shard is (its seal header `seal`, in the room's life
    /// `life`), and the room's message it says it follows (its `Tabd-Follows` header, which
    /// its seal covers): only life-bound seals, and a message without that header is forged.
    /// Whether it stands where it says is the room's to check (``ClusterRoomMachine``).
    func judgeShard(seal: String?, subject: String, life: String, headers: [String: String], body: [UInt8]) -> (verdict: Verdict, follows: UInt64?) {
        guard let seal else { return (.unsigned, nil) }
        guard secret.version(of: seal) == ClusterSecret.lifeBoundVersion, let text = headers[EngineNames.followsHeader],
              let follows = UInt64(text) else { return (.forged, nil) }
        let fields = Self.lifeBoundFields(subject: subject, life: life, kind: headers[EngineNames.kindHeader], follows: follows,
                                          node: headers[EngineNames.nodeHeader], incarnation: headers[EngineNames.incarnationHeader],
                                          messageID: headers[EngineNames.messageIDHeader], forwards: headers[EngineNames.forwardsHeader],
                                          sealMark: headers[EngineNames.sealMarkHeader])
        return (secret.opens(seal, .batch, fields: fields, body: body, version: ClusterSecret.lifeBoundVersion) ? .sealed : .forged, follows)
    }

    /// Whether `seal` is of a key other than the one this node seals with (a key being
    /// rotated out): what it sealed is sealed again with this node's key.
    func isOtherKey(_ seal: String?) -> Bool {
        guard let seal else { return false }
        return secret.keyID(of: seal) != secret.sealingKeyID
    }

    /// The shard layout's seal, over its subject and body.
    func sealLayout(subject: String, body: [UInt8]) -> String { secret.seal(.layout, fields: [subject], body: body) }

    func judgeLayout(seal: String?, subject: String, body: [UInt8]) -> Verdict {
        guard let seal else { return .unsigned }
        return secret.opens(seal, .layout, fields: [subject], body: body) ? .sealed : .forged
    }

    /// A webhook delivery record's seal, over its subject (the webhook and the shard) and body.
    func sealHook(subject: String, body: [UInt8]) -> String { secret.seal(.webhook, fields: [subject], body: body) }

    func judgeHook(seal: String?, subject: String, body: [UInt8]) -> Verdict {
        guard let seal else { return .unsigned }
        return secret.opens(seal, .webhook, fields: [subject], body: body) ? .sealed : .forged
    }

    /// A snapshot's seal: over its subject (its room) and its body (which names the
    /// stream, by creation time, and the stream sequence it stands at).
    func sealSnapshot(subject: String, body: [UInt8]) -> String { secret.seal(.snapshot, fields: [subject], body: body) }

    func judgeSnapshot(seal: String?, subject: String, body: [UInt8]) -> Verdict {
        guard let seal else { return .unsigned }
        return secret.opens(seal, .snapshot, fields: [subject], body: body) ? .sealed : .forged
    }
}
