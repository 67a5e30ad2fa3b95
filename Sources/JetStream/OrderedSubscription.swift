import CNATS
import Dispatch
import Glibc
import Locking

/// An ordered consumer that tabd runs itself, in place of libnats' push subscriptions:
/// every message of `subject` in `stream`, once, in stream order, from a start on.
///
/// libnats' own ordered consumer obeys what reaches its inbox: it answers a flow-control
/// request on the subject the request names, and a heartbeat naming
/// `Nats-Consumer-Stalled` with a message to that subject. Anyone holding the engine's
/// credentials can publish into the inbox, so that made a node publish where a message
/// said. Here the consumer is made by tabd (a push consumer without flow control, with
/// heartbeats, acknowledging nothing), its inbox is a core subscription that libnats
/// delivers and never answers, and ``OrderedFollow`` decides what is delivered. A gap
/// in the consumer's count, or a consumer that has said nothing (not even a heartbeat)
/// for three heartbeats, makes the consumer again from the stream sequence after the
/// last delivered, as libnats did.
///
/// The handler is called on libnats' threads, one message at a time, in order.
public final class OrderedSubscription: @unchecked Sendable {
    // @unchecked: the libnats subscriptions in `state` are thread-safe objects; each is
    // unsubscribed once (when replaced or cancelled) and destroyed later on a queue.
    private let client: EngineClient
    private let stream: String
    private let subject: String
    private let headerKeys: [String]
    private let handler: @Sendable (StreamMessage) -> Void
    private let report: @Sendable (Report) -> Void
    private let state: Locked<State>
    /// Held while a message is judged and handed to the handler: deliveries stay in order
    /// even when a consumer replaced meanwhile delivers on another thread.
    private let order = Locked(())
    private let queue: DispatchQueue
    private let timer: any DispatchSourceTimer

    /// What a subscription tells its owner besides messages.
    public enum Report: Sendable {
        /// A second message for a place already delivered: one of them was not the engine's.
        case duplicate(String)
        /// The consumer was made again (a gap, silence, a reconnect); `count` of them since
        /// the last message delivered (an engine away for long makes one every three
        /// heartbeats: a log need not say each).
        case restarted(from: UInt64, why: String, count: Int)
    }

    private struct State {
        var follow: OrderedFollow
        /// The current consumer's inbox subscription and which making of it it is.
        var current: OpaquePointer?
        var generation = 0
        var cancelled = false
        var restarting = false
        /// Restarts since the last message delivered.
        var restarts = 0
        /// When the current consumer last said something (uptime nanoseconds).
        var lastActivity: UInt64
        /// When a message was last delivered, or the consumer last made again.
        var lastProgress: UInt64 = DispatchTime.now().uptimeNanoseconds
    }

    /// How long the consumer may say nothing before it is made again: three heartbeats.
    static let silenceNanoseconds = UInt64(3 * EngineClient.orderedHeartbeatNanoseconds)

    init(client: EngineClient, stream: String, subject: String, startSeq: UInt64, headerKeys: [String],
         handler: @escaping @Sendable (StreamMessage) -> Void, report: @escaping @Sendable (Report) -> Void) throws(EngineError) {
        self.client = client
        self.stream = stream
        self.subject = subject
        self.headerKeys = headerKeys
        self.handler = handler
        self.report = report
        queue = DispatchQueue(label: "tabd.engine.follow.\(stream)")
        timer = DispatchSource.makeTimerSource(queue: queue)
        state = Locked(State(follow: OrderedFollow(stream: stream, consumer: Self.newName(), startSeq: startSeq),
                             lastActivity: DispatchTime.now().uptimeNanoseconds))
        let interval = DispatchTimeInterval.nanoseconds(Int(EngineClient.orderedHeartbeatNanoseconds))
        timer.schedule(deadline: .now() + interval, repeating: interval)
        timer.setEventHandler { [weak self] in self?.checkSilence() }
        // Resumed before anything can throw: deinit cancels it, and a suspended source
        // must not be released.
        timer.resume()
        try start()
    }

    /// A consumer name nobody else chose: `tabd_` and 24 random base-36 digits.
    static func newName() -> String {
        "tabd_" + (0..<2).map { _ in String(UInt64.random(in: 0...UInt64.max), radix: 36) }.joined()
    }

    /// Makes the current consumer (its name is in `state`) and its inbox, from the stream
    /// sequence after the last delivered.
    private func start() throws(EngineError) {
        let (name, startSeq, generation) = state.withLock { s in
            s.generation += 1
            return (s.follow.consumer, s.follow.lastStreamSeq + 1, s.generation)
        }
        let inbox = "_INBOX." + Self.newName()
        let box = Unmanaged.passRetained(InboxBox(owner: self, generation: generation))
        var sub: OpaquePointer?
        var s = client.whileOpen { connection, _ in natsConnection_Subscribe(&sub, connection, inbox, Self.deliver, box.toOpaque()) } ?? NATS_CONNECTION_CLOSED
        guard s == NATS_OK, let sub else {
            box.release()
            throw EngineError(s, jsErrCode(rawValue: 0), "cannot subscribe to a consumer's inbox")
        }
        natsSubscription_SetOnCompleteCB(sub, { closure in Unmanaged<InboxBox>.fromOpaque(closure!).release() }, box.toOpaque())
        var cfg = jsConsumerConfig()
        jsConsumerConfig_Init(&cfg)
        var info: UnsafeMutablePointer<jsConsumerInfo>?
        var err = jsErrCode(rawValue: 0)
        s = client.whileOpen { _, js in name.withCString { cName in
            inbox.withCString { cInbox in
                subject.withCString { cSubject in
                    cfg.Name = cName
                    cfg.DeliverSubject = cInbox
                    cfg.FilterSubject = cSubject
                    cfg.DeliverPolicy = startSeq <= 1 ? js_DeliverAll : js_DeliverByStartSequence
                    if startSeq > 1 { cfg.OptStartSeq = startSeq }
                    cfg.AckPolicy = js_AckNone
                    cfg.FlowControl = false
                    cfg.Heartbeat = EngineClient.orderedHeartbeatNanoseconds
                    cfg.MaxDeliver = 1
                    cfg.MemoryStorage = true
                    cfg.Replicas = 1
                    return js_AddConsumer(&info, js, stream, &cfg, nil, &err)
                }
            }
        } } ?? NATS_CONNECTION_CLOSED
        if let info { jsConsumerInfo_Destroy(info) }
        guard s == NATS_OK else {
            retireSubscription(sub)
            throw EngineError(s, err, "cannot make a consumer of \(subject) in \(stream)")
        }
        // Cancelled or replaced meanwhile: this one goes again.
        let (stale, previous) = state.withLock { st -> (Bool, OpaquePointer?) in
            guard !st.cancelled, st.generation == generation else { return (true, nil) }
            defer { st.current = sub; st.lastActivity = DispatchTime.now().uptimeNanoseconds }
            return (false, st.current)
        }
        if let previous { retireSubscription(previous) }
        if stale {
            retireSubscription(sub)
            deleteConsumer(name)
        }
    }

    /// Makes the consumer again from the stream sequence after the last delivered (on the
    /// subscription's queue: a round trip to the engine). The old consumer is deleted.
    private func restart(why: String, generation: Int? = nil, from seq: UInt64? = nil) {
        let (old, from, count) = state.withLock { s -> (String?, UInt64, Int) in
            guard !s.cancelled, !s.restarting, generation == nil || generation == s.generation else { return (nil, 0, 0) }
            s.restarting = true
            s.restarts += 1
            s.lastProgress = DispatchTime.now().uptimeNanoseconds
            let old = s.follow.consumer
            if let seq { s.follow.restart(consumer: Self.newName(), from: seq) } else { s.follow.restart(consumer: Self.newName()) }
            return (old, s.follow.lastStreamSeq + 1, s.restarts)
        }
        guard let old else { return }
        report(.restarted(from: from, why: why, count: count))
        deleteConsumer(old)
        do { try start() } catch {
            // The engine is away: the silence check tries again.
            state.withLock { $0.lastActivity = DispatchTime.now().uptimeNanoseconds }
        }
        state.withLock { $0.restarting = false }
    }

    /// Makes the consumer again from stream sequence `seq` (or from after the last
    /// delivered, when that is earlier), on the subscription's queue: messages delivered
    /// since `seq` come again, and their receiver passes over what it has seen.
    public func restart(from seq: UInt64, why: String) {
        queue.async { [weak self] in self?.restart(why: why, from: seq) }
    }

    /// Makes the consumer again from after the last delivered only if it has delivered
    /// nothing, and was not made again, for `nanoseconds`: many receivers of one consumer
    /// (the rooms of a shard) each asking after a stall make it once.
    public func restartIfStalled(for nanoseconds: UInt64, why: String) {
        queue.async { [weak self] in
            guard let self else { return }
            let stalled = self.state.withLock { DispatchTime.now().uptimeNanoseconds &- $0.lastProgress >= nanoseconds }
            if stalled { self.restart(why: why) }
        }
    }

    /// The stream sequence of the last message delivered (or the start's predecessor).
    public var lastDelivered: UInt64 { state.withLock { $0.follow.lastStreamSeq } }

    private func checkSilence() {
        let silent = state.withLock { s in
            !s.cancelled && !s.restarting && DispatchTime.now().uptimeNanoseconds &- s.lastActivity > Self.silenceNanoseconds
        }
        if silent { restart(why: "nothing from the consumer for \(Self.silenceNanoseconds / 1_000_000) ms") }
    }

    private func deleteConsumer(_ name: String) {
        let client = client, stream = stream
        DispatchQueue.global().async {
            var err = jsErrCode(rawValue: 0)
            _ = client.whileOpen { _, js in js_DeleteConsumer(js, stream, name, nil, &err) }
        }
    }

    /// Stops deliveries now and deletes the consumer. Idempotent.
    public func cancel() {
        let (sub, name) = state.withLock { s -> (OpaquePointer?, String?) in
            guard !s.cancelled else { return (nil, nil) }
            s.cancelled = true
            defer { s.current = nil }
            return (s.current, s.follow.consumer)
        }
        guard let name else { return }
        timer.cancel()
        if let sub { retireSubscription(sub) }
        deleteConsumer(name)
    }

    deinit { cancel() }

    // MARK: Deliveries

    private static let deliver: natsMsgHandler = { _, _, msg, closure in
        guard let msg, let closure else { return }
        let box = Unmanaged<InboxBox>.fromOpaque(closure).takeUnretainedValue()
        guard let owner = box.owner else { return natsMsg_Destroy(msg) }
        owner.received(msg, generation: box.generation)
    }

    /// One message in a consumer's inbox (destroyed here).
    private func received(_ msg: OpaquePointer, generation: Int) {
        defer { natsMsg_Destroy(msg) }
        let reply = natsMsg_GetReply(msg).map { String(cString: $0) }
        var value: UnsafePointer<CChar>?
        let status = natsMsgHeader_Get(msg, "Status", &value) == NATS_OK ? value.map { String(cString: $0) } : nil
        order.withLock { _ in
            let verdict = state.withLock { s -> OrderedFollow.Verdict? in
                guard !s.cancelled, s.generation == generation else { return nil }
                let verdict = s.follow.judge(reply: reply, status: status)
                switch verdict {
                case .deliver:
                    s.lastActivity = DispatchTime.now().uptimeNanoseconds
                    s.lastProgress = s.lastActivity
                    s.restarts = 0
                case .heartbeat: s.lastActivity = DispatchTime.now().uptimeNanoseconds
                default: break
                }
                return verdict
            }
            switch verdict {
            case nil, .heartbeat?, .foreign?: return
            case let .duplicate(why)?: report(.duplicate(why))
            case let .reset(_, why)?: queue.async { [weak self] in self?.restart(why: why, generation: generation) }
            case let .deliver(seq, pending)?:
                handler(EngineClient.message(msg, headerKeys: headerKeys, streamSeq: seq, pending: pending))
            }
        }
    }
}

/// An inbox's owner, weakly, and which making of the consumer the inbox is for.
final class InboxBox: @unchecked Sendable {
    // @unchecked: both set once in init.
    weak var owner: OrderedSubscription?
    let generation: Int
    init(owner: OrderedSubscription, generation: Int) { self.owner = owner; self.generation = generation }
}
