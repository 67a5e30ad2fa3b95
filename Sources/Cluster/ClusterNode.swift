import Auth
import Coordinator
import Dispatch
import FoundationEssentials
import Glibc
import JetStream
import Locking

/// This tabd as a node of a cluster: its connection to the engine (NATS JetStream), the
/// other nodes' liveness, and the rooms as the engine holds them (one stream each, see
/// docs/CLUSTER.md). Nothing here survives the process: the engine is the state.
public final class ClusterNode: Sendable {
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let description: String
        /// The engine could not be read (a stream being created, a leader being elected,
        /// a timeout): the same call may succeed a moment later. False for a refusal.
        public let mayPass: Bool
        init(_ description: String, mayPass: Bool = false) { self.description = description; self.mayPass = mayPass }
    }

    /// How many times a room's read is tried while the engine answers errors (a stream being
    /// created or electing a leader), and the pause before each next try: about 15 s in all.
    public static let loadAttempts = 60
    public static func loadPause(after attempt: Int) -> Duration { .milliseconds(Int(EngineRetry.standard.pause(after: attempt) * 1000)) }

    public let name: String
    /// This life of the node: a random id per start, in its heartbeats and on every message
    /// it writes. A node started again under the same name is another incarnation, so the
    /// clients of its earlier life are known to be gone even though its name is heard.
    public let incarnation = Coordinator.newEpoch()
    /// How many copies the engine keeps of each room (3 with three or more servers, else 1).
    public let replicas: Int
    /// A node not heard from for this long is dead: its clients leave their rooms.
    public let heartbeatTimeout: Double
    let client: EngineClient
    package let log: @Sendable (String) -> Void
    package let stats = EngineStats()
    /// How this node seals what it writes and judges what it reads.
    public let trust: EngineTrust
    /// When each node was last heard (uptime), its incarnation then (nil from a tabd whose
    /// heartbeat carries only its name) and the time its last sealed heartbeat carried
    /// (a heartbeat older than that is a replay).
    private let seen = Locked([String: (time: Double, incarnation: String?, sealedAt: Double?)]())
    /// Engine messages not believed: each counted, logged once in a while per kind.
    private let rejections: RejectionLog
    private let started = ClusterNode.now()
    /// Since when the engine connection has been up (nil while down): other nodes are
    /// judged only after this node has listened for a whole timeout.
    private let connectedSince = Locked<Double?>(ClusterNode.now())
    private let heartbeat = Locked<(any DispatchSourceTimer)?>(nil)
    private let subscriptions = Locked([EngineSubscription]())
    private let reconnected = Locked<Handler?>(nil)
    /// ``onGiveUp(_:)``'s handler, and libnats' reason if it gave up before there was one.
    private let gaveUp = Locked<(handler: (@Sendable (String) -> Void)?, reason: String?)>((nil, nil))
    /// The connection, for reading the engine server's version on each reconnect (nil
    /// before init has made it and after close()).
    private let versionWatch = Locked<EngineClient?>(nil)
    /// What the engine server this node is connected to said of itself, last time it was asked.
    private let server = Locked<EngineServerInfo?>(nil)
    /// How the cluster lays rooms out in shards (recorded in the engine by its first node).
    public let layout: ShardLayout
    /// Where this node creates rooms: in shards, or (phase one of moving a cluster of an
    /// earlier tabd to shards) in streams of their own, which nodes of that tabd read.
    public let createsInShards: Bool
    /// Each shard's follower on this node, and its stream's creation time.
    let followers: [ShardFollower]
    let shardCreation: [Int64]
    /// Rooms this node has just created in a shard, until their load here takes them: the
    /// listener registered before their first message, and where they start.
    let justCreated = Locked([RoomID: (ShardListener, ClusterRoom.Start)]())

    /// Where rooms are created (``createsInShards``).
    public enum RoomPlacement: String, Sendable, CaseIterable {
        /// As subjects of the cluster's shard streams (the default).
        case shards
        /// Each in a stream of its own, as a tabd before shards did: phase one of moving a
        /// cluster of that tabd to shards, while its nodes still run.
        case streams
    }

    static func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    /// The oldest NATS release a node runs on: per-subject compare-and-set checked in Raft
    /// order (2.9.21), a new leader that applies its whole log before it serves (2.11.0),
    /// and the fixes to both up to 2.11.7.
    public static let minimumEngine = (2, 11, 7)
    public static var minimumEngineText: String { "\(minimumEngine.0).\(minimumEngine.1).\(minimumEngine.2)" }

    /// Connects to the engine at `urls` (over TLS and with credentials as `security` says),
    /// makes sure the shared snapshot stream exists (three copies if the engine can keep
    /// three, else one) and starts the heartbeat.
    ///
    /// It refuses an engine server older than ``minimumEngine``, logs the version of the
    /// server it is connected to, at start and on every reconnect, and `warn`s (default:
    /// `log` with "warning: ") when a reconnect lands on an older server.
    public init(urls: [String], name: String, trust: EngineTrust, security: EngineSecurity = EngineSecurity(), heartbeatTimeout: Double = 5,
                shards: Int = ShardLayout.defaultShards, placement: RoomPlacement = .shards,
                log: @escaping @Sendable (String) -> Void, warn: (@Sendable (String) -> Void)? = nil) throws(Failure) {
        self.name = name
        createsInShards = placement == .shards
        self.trust = trust
        self.heartbeatTimeout = heartbeatTimeout
        self.log = log
        rejections = RejectionLog(stats: stats, log: log)
        let warn = warn ?? { log("warning: \($0)") }
        do {
            client = try EngineClient(urls: urls, name: "tabd \(name)", security: security) { [connectedSince, reconnected, versionWatch, server] up in
                connectedSince.withLock { $0 = up ? ($0 ?? ClusterNode.now()) : nil }
                log(up ? "engine connection up" : "engine connection lost; retrying")
                if up, let handler = reconnected.withLock({ $0 }) { DispatchQueue.global().async { handler.run() } }
                // The first connection is reported by init; a reconnect may be to another server.
                if up, let client = versionWatch.withLock({ $0 }) {
                    DispatchQueue.global().async { Self.reportVersion(client, into: server, log: log, warn: warn) }
                }
            } onGiveUp: { [gaveUp] reason in
                log("libnats closed the engine connection for good (\(reason)): no more retries")
                let handler = gaveUp.withLock { g -> (@Sendable (String) -> Void)? in
                    if g.handler == nil { g.reason = reason }
                    return g.handler
                }
                if let handler { DispatchQueue.global().async { handler(reason) } }
            }
        } catch { throw Failure("cannot reach the engine at \(EngineURL.redacted(urls)): \(error)") }
        // Rooms in shards need a server whose per-subject compare-and-set holds (NATS 2.11.7
        // and later: docs/CLUSTER.md, "The engine's version").
        if case let .success(info) = client.connectedServerInfo(), !info.atLeast(Self.minimumEngine.0, Self.minimumEngine.1, Self.minimumEngine.2) {
            client.close()
            throw Failure("the engine server \(info.serverName) (\(info.url)) runs NATS \(info.version); tabd needs NATS \(Self.minimumEngineText) or later "
                          + "(its rooms live in shard streams, ordered by a per-subject compare-and-set that older servers do not keep under failures)")
        }
        // The engine may still be electing its leaders: ask again for up to about 30 s.
        // With three or more servers, three copies; one if the engine cannot keep three.
        let connection = client
        let got = (try? EngineRetry.start.run("the engine is not ready", log: log) { _ -> EngineRetry.Outcome<Int> in
            var notReady: String?
            for asked in urls.count >= 3 ? [3, 1] : [1] {
                do throws(EngineError) {
                    return .done(try connection.ensureStream(name: EngineNames.snapshots, subjects: ["tabd.snap.*"], replicas: asked, maxPerSubject: 1).replicas)
                } catch {
                    if error.isTimeout || error.code == 0 { notReady = "\(error)"; break }
                    log("the engine cannot keep \(asked) copies (\(error))")
                }
            }
            return .again(notReady)
        }) ?? nil
        guard let got else { client.close(); throw Failure("the engine at \(EngineURL.redacted(urls)) refused every stream") }
        replicas = got
        // The shards: their layout (the first node's), their streams, a follower of each.
        do {
            layout = try Self.establishLayout(client: client, trust: trust, replicas: got, shards: shards, log: log)
            shardCreation = try Self.ensureShards(client: client, layout: layout, replicas: got, log: log)
        } catch {
            client.close()
            throw error
        }
        let (stats, rejections) = (stats, rejections)
        var made: [ShardFollower] = []
        do {
            for shard in 0..<layout.shards {
                // The engine may be electing a leader or the connection coming back (a server
                // paused or restarted a moment ago): each shard is tried again for a while
                // before the start fails.
                made.append(try Self.retrying(for: 15, log: log, what: "following shard \(shard)") { [engine = client] in
                    let start = (try engine.streamInfo(EngineNames.shardStream(shard))?.lastSeq ?? 0) + 1
                    return try ShardFollower(client: engine, shard: shard, start: start, headerKeys: ClusterRoom.headerKeys) { report in
                        switch report {
                        case let .duplicate(why):
                            // A consumer made again after a server restart may deliver thousands
                            // again: counted each, logged once in a while.
                            rejections.rejected("delivery", "shard \(shard): \(why)")
                        case let .restarted(from, why, count):
                            stats.refollowed()
                            if count == 1 || count % 20 == 0 {
                                log("shard \(shard): following it again from \(from): \(why)" + (count > 1 ? " (\(count) times since its last message)" : ""))
                            }
                        }
                    }
                })
            }
        } catch {
            made.forEach { $0.cancel() }
            client.close()
            throw Failure("cannot follow the shards: \(error)")
        }
        followers = made
        Self.reportVersion(client, into: server, log: log, warn: warn)
        versionWatch.withLock { $0 = client }
        // Its own queue: blocking engine calls on the global queues cannot delay it.
        let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "tabd.cluster.heartbeat"))
        // Each beat carries its time and this life's incarnation, sealed.
        let beatSubject = EngineNames.heartbeatPrefix + name
        timer.schedule(deadline: .now(), repeating: .milliseconds(Int(heartbeatTimeout * 1000 / 5)))
        timer.setEventHandler { [client, trust, incarnation] in
            client.publishCore(subject: beatSubject, data: trust.sealCore(.heartbeat, subject: beatSubject, args: [incarnation]))
        }
        heartbeat.withLock { $0 = timer }
        do {
            let sub = try client.subscribeCore(subject: EngineNames.heartbeatPrefix + "*") { [weak self] message in
                self?.heard(message)
            }
            subscriptions.withLock { $0.append(sub) }
        } catch { client.close(); throw Failure("cannot hear other nodes: \(error)") }
        timer.resume()
    }

    /// A heartbeat: believed when sealed, recent and newer than the node's last one (or,
    /// in phase one of the move to sealed messages, unsealed: a node's incarnation or name).
    private func heard(_ message: StreamMessage) {
        let node = String(message.subject.dropFirst(EngineNames.heartbeatPrefix.count))
        let (verdict, opened, why) = trust.openCore(.heartbeat, subject: message.subject, data: message.data, lifetime: heartbeatTimeout)
        switch verdict {
        case .sealed:
            guard let opened, let time = opened.time, opened.args.count == 1 else { return rejected("heartbeat", "a heartbeat of '\(node)' without its incarnation") }
            let believed = seen.withLock { seen -> Bool in
                if let last = seen[node]?.sealedAt, time <= last { return false }
                seen[node] = (Self.now(), opened.args[0], time)
                return true
            }
            if !believed { rejected("heartbeat", "a heartbeat of '\(node)' no newer than the last one heard (a replay)") }
        case .unsigned where trust.acceptUnsigned:
            let said = String(decoding: message.data, as: UTF8.self)
            seen.withLock { $0[node] = (Self.now(), said == node ? nil : said, $0[node]?.sealedAt) }
        case .unsigned, .forged, .sealedUnbound:
            rejected("heartbeat", "a heartbeat of '\(node)': \(why)")
        }
    }

    /// A message from the engine that is not believed: counted, and logged at most once
    /// every ``RejectionLog/interval`` per kind (with how many were not logged meanwhile).
    package func rejected(_ kind: String, _ why: String) {
        rejections.rejected(kind, why)
    }

    /// When each node was last heard (uptime seconds).
    func heardTimes() -> [String: Double] { seen.withLock { $0.mapValues(\.time) } }

    /// The incarnation `node`'s heartbeats said last, if heard.
    package func incarnation(of node: String) -> String? { seen.withLock { $0[node]?.incarnation } }

    /// Whether the engine is reachable now.
    public var connected: Bool { client.isConnected }

    /// What the engine server this node is connected to said of itself (version, name),
    /// as last read: at start and after each reconnect. Nil when it could not be read.
    /// Features of newer NATS releases are to be used only when this says they are there.
    public var engineServer: EngineServerInfo? { server.withLock { $0 } }

    /// Reads the version of the engine server `client` is on, keeps it in `box` and logs it:
    /// a warning for a server older than ``minimumEngine`` (reached by a reconnect), else
    /// the version and what the ack then depends on (the servers' `sync_interval`, which no
    /// client can read).
    static func reportVersion(_ client: EngineClient, into box: Locked<EngineServerInfo?>,
                              log: @Sendable (String) -> Void, warn: @Sendable (String) -> Void) {
        switch client.connectedServerInfo() {
        case let .failure(why):
            box.withLock { $0 = nil }
            log("engine server's version unknown (\(why))")
        case let .success(info):
            box.withLock { $0 = info }
            let which = "engine server \(info.serverName) (\(info.url)\(info.isConnectedServer ? "" : ", read from another server at that address"))"
            if !info.atLeast(minimumEngine.0, minimumEngine.1, minimumEngine.2) {
                // Reconnected to an older server than the node started on (a node does not
                // start on one).
                warn("\(which) runs NATS \(info.version); tabd needs NATS \(minimumEngineText) or later: its rooms' compare-and-set "
                     + "may not hold there\(info.canSyncBeforeAck ? "" : ", and it cannot sync JetStream's writes to disk before it acks them") (docs/CLUSTER.md)")
            } else {
                log("\(which) runs NATS \(info.version): acks are synced to disk before they are sent only if the engine's "
                    + "servers are configured `jetstream { sync_interval: always }` (docs/CLUSTER.md)")
            }
        }
    }

    /// This node's figures for `/metrics` (Prometheus text).
    public var metricsText: String { stats.render(node: name, connected: connected) }

    /// Whether `node` is alive: this node, or one heard from within the timeout — and,
    /// when `incarnation` names the life asked about, in that life (a node started again
    /// under the same name is heard, but its earlier life is gone). Until this node has
    /// listened for a whole timeout, nodes it has not heard yet count as alive.
    public func isAlive(_ node: String, incarnation: String? = nil) -> Bool {
        if node == name { return true }
        let now = Self.now()
        // Deaf for a while (starting, or the connection was down): nobody is judged.
        guard let since = connectedSince.withLock({ $0 }), now - since >= heartbeatTimeout, now - started >= heartbeatTimeout else { return true }
        guard let last = seen.withLock({ $0[node] }) else { return false }
        if let incarnation, let heard = last.incarnation, heard != incarnation { return false }
        return now - last.time < heartbeatTimeout
    }

    /// Calls `handler` (off the engine's threads) each time the engine connection comes
    /// back: notices sent meanwhile (deletions) were missed.
    public func onReconnect(_ handler: @escaping @Sendable () -> Void) {
        reconnected.withLock { $0 = Handler(handler) }
    }

    /// Calls `handler` (off the engine's threads) with libnats' reason if libnats closes the
    /// engine connection for good (the servers refused the node's credentials while it
    /// reconnected), at once if that happened already. The node is useless from then on.
    public func onGiveUp(_ handler: @escaping @Sendable (String) -> Void) {
        let reason = gaveUp.withLock { g -> String? in
            g.handler = handler
            defer { g.reason = nil }
            return g.reason
        }
        if let reason { DispatchQueue.global().async { handler(reason) } }
    }

    /// Calls `handler` with a room's id and its deleted stream's creation time (nil from a
    /// node that does not seal, believed in phase one only) whenever any node deletes that
    /// room: a sealed, recent notice. The handler checks the engine before it closes anything.
    public func onDeletion(_ handler: @escaping @Sendable (RoomID, Int64?) -> Void) throws(Failure) {
        do {
            let sub = try client.subscribeCore(subject: EngineNames.deletedPrefix + "*") { [weak self] message in
                guard let self else { return }
                let room = String(message.subject.dropFirst(EngineNames.deletedPrefix.count))
                let (verdict, opened, why) = trust.openCore(.deletion, subject: message.subject, data: message.data, lifetime: heartbeatTimeout)
                switch verdict {
                case .sealed:
                    guard let created = opened?.args.first.flatMap({ Int64($0) }) else { return rejected("deletion", "a deletion notice of '\(room)' without its stream") }
                    handler(room, created)
                case .unsigned where trust.acceptUnsigned: handler(room, nil)
                case .unsigned, .forged, .sealedUnbound: rejected("deletion", "a deletion notice of '\(room)': \(why)")
                }
            }
            subscriptions.withLock { $0.append(sub) }
        } catch { throw Failure("cannot hear deletions: \(error)") }
    }

    // MARK: Forwarding

    /// Where the answers to this node's forwarded commands come (this life of it).
    package var forwardReply: String { EngineNames.forwardAnswers(node: name, incarnation: incarnation) }

    /// Calls `requests` with the commands another node forwards to this one, and `answers`
    /// with the answers to commands this node forwarded, as they come in one message (on
    /// the engine's threads; quick). What does not parse is dropped: the sender decides a
    /// command itself when no answer comes.
    ///
    /// A message of forwards is taken only when sealed by a node, recent, and meant for this
    /// life of this node (one meant for an earlier life is refused, so its sender decides
    /// it); each command's reply subject must be its sender's own (``forwardReply`` of the
    /// sender and life the seal names), the only place an answer ever goes.
    package func onForwards(requests: @escaping @Sendable ([ForwardRequest]) -> Void,
                            answers: @escaping @Sendable ([ForwardAnswer]) -> Void) throws(Failure) {
        do {
            let asked = try client.subscribeCore(subject: EngineNames.forwardPrefix + name) { [weak self] message in
                guard let self else { return }
                let (verdict, opened, why) = trust.openCore(.forward, subject: message.subject, data: message.data, lifetime: heartbeatTimeout)
                var parsed: [ForwardRequest]
                switch verdict {
                case .sealed:
                    guard let opened, opened.args.count == 3, Self.isName(opened.args[0]), Self.isName(opened.args[1]) else {
                        return rejected("forward", "forwarded commands without their sender")
                    }
                    let reply = EngineNames.forwardAnswers(node: opened.args[0], incarnation: opened.args[1])
                    parsed = Self.lines(opened.payload).compactMap { try? ForwardRequest(bytes: $0) }
                    if parsed.contains(where: { $0.reply != reply }) {
                        rejected("forward", "forwarded commands of '\(opened.args[0])' asking for answers elsewhere than its own reply subject")
                        parsed.removeAll { $0.reply != reply }
                    }
                    if opened.args[2] != incarnation {
                        // Meant for another life of this node: refused, so that its sender decides them.
                        answer(parsed.map { ForwardAnswer(id: $0.id, room: $0.room, refused: "forwarded to another life of node '\(name)'") }, to: reply)
                        return
                    }
                case .unsigned where trust.acceptUnsigned:
                    parsed = Self.lines(message.data).compactMap { try? ForwardRequest(bytes: $0) }
                        .filter { EngineNames.isForwardReply($0.reply) }
                case .unsigned, .forged, .sealedUnbound:
                    return rejected("forward", "forwarded commands: \(why)")
                }
                if !parsed.isEmpty { requests(parsed) }
            }
            subscriptions.withLock { $0.append(asked) }
            let answered = try client.subscribeCore(subject: forwardReply) { [weak self] message in
                guard let self else { return }
                let (verdict, opened, why) = trust.openCore(.answer, subject: message.subject, data: message.data, lifetime: heartbeatTimeout)
                let body: [UInt8]
                switch verdict {
                case .sealed: body = opened?.payload ?? []
                case .unsigned where trust.acceptUnsigned: body = message.data
                case .unsigned, .forged, .sealedUnbound: return rejected("answer", "answers to forwarded commands: \(why)")
                }
                let parsed = Self.lines(body).compactMap { try? ForwardAnswer(bytes: $0) }
                if !parsed.isEmpty { answers(parsed) }
            }
            subscriptions.withLock { $0.append(answered) }
        } catch { throw Failure("cannot hear forwarded commands: \(error)") }
    }

    /// Sends clients' commands to `node`, the room's writer, in as few messages as fit (one
    /// command per line: compact JSON holds no raw line feed). `hint` is the writer's life as
    /// the room's stream names it, for when no heartbeat of it was heard yet.
    package func forward(_ requests: [ForwardRequest], to node: String, incarnation hint: String? = nil) {
        stats.forwarded(requests.count)
        // Sealed for the life of `node` this node heard last (else the one the room's stream
        // names): another life refuses them, so that this node decides them.
        let subject = EngineNames.forwardPrefix + node
        let target = incarnation(of: node) ?? hint ?? "unknown"
        for message in Self.messages(requests.map(\.bytes)) {
            client.publishCore(subject: subject, data: trust.sealCore(.forward, subject: subject, args: [name, incarnation, target], payload: message))
        }
    }

    /// Answers forwarded commands of one node, in as few messages as fit, on its reply
    /// subject (``forwardReply``): never on any other.
    package func answer(_ answers: [ForwardAnswer], to reply: String) {
        guard EngineNames.isForwardReply(reply) else { return rejected("forward", "an answer asked for on '\(reply.prefix(80))'") }
        for message in Self.messages(answers.map(\.bytes)) {
            client.publishCore(subject: reply, data: trust.sealCore(.answer, subject: reply, args: [name], payload: message))
        }
    }

    /// Whether `s` can be a node's name or incarnation (one subject token, as room ids).
    static func isName(_ s: String) -> Bool { Limits.isRoomID(s) }

    /// A message of forwards carries lines up to this many bytes (the engine takes 1 MB by
    /// default; a single larger line goes alone, and is refused there).
    static let maxForwardMessageBytes = 256 * 1024

    /// `lines` joined by line feeds, in messages of at most ``maxForwardMessageBytes``.
    static func messages(_ lines: [[UInt8]]) -> [[UInt8]] {
        var out: [[UInt8]] = []
        var current: [UInt8] = []
        for line in lines {
            if !current.isEmpty, current.count + 1 + line.count > maxForwardMessageBytes {
                out.append(current)
                current = []
            }
            if !current.isEmpty { current.append(0x0A) }
            current += line
        }
        if !current.isEmpty { out.append(current) }
        return out
    }

    private static func lines(_ bytes: [UInt8]) -> [[UInt8]] { bytes.split(separator: 0x0A).map(Array.init) }

    public func close() {
        followers.forEach { $0.cancel() }
        versionWatch.withLock { $0 = nil }
        heartbeat.withLock { $0 }?.cancel()
        for sub in subscriptions.withLock({ $0 }) { sub.cancel() }
        client.close()
    }

    // MARK: Rooms

    /// Every room the engine holds, by id: those of the shards (their directory records)
    /// and those with a stream of their own.
    public func roomIDs() throws(Failure) -> [RoomID] {
        do {
            let own = try client.streamNames().filter { $0.hasPrefix(EngineNames.roomStreamPrefix) }
                .map { String($0.dropFirst(EngineNames.roomStreamPrefix.count)) }
            return Array(Set(own).union(try roomsInShards())).sorted()
        } catch { throw Failure("cannot list rooms: \(error)") }
    }

    /// ``roomIDs()``, asked again for up to `seconds` while the engine answers errors: after
    /// the engine's servers (re)start, they elect their leaders for a moment, as a room's
    /// load also waits out (``ClusterRoom``).
    public func roomIDs(waitingUpTo seconds: Double) throws(Failure) -> [RoomID] {
        let deadline = DispatchTime.now() + seconds
        while true {
            do { return try roomIDs() } catch {
                guard DispatchTime.now() < deadline else { throw error }
                log("\(error); asking again")
                Threads.sleep(seconds: 0.5)
            }
        }
    }

    public func roomExists(_ id: RoomID) throws(Failure) -> Bool {
        do { return try existsInShard(id) || client.streamInfo(EngineNames.stream(id)) != nil } catch {
            throw Failure("cannot read room '\(id)': \(error)")
        }
    }

    /// Creates room `id` with `tabs` unless it exists; true when this call created it.
    /// The first message of its stream (epoch and tabs) is stored only if the stream is
    /// still empty, so of nodes creating it at once exactly one succeeds.
    ///
    /// With `recordLater`, a room created in a shard is answered before its directory record
    /// is stored (its load here waits for that: ``ClusterRoom/recordStored()``); else the
    /// room is listed when this returns.
    public func createRoom(_ id: RoomID, tabs: [TabInfo], recordLater: Bool = false) throws(Failure) -> Bool {
        // A room is in one place: one that lives in the other is not created again.
        let elsewhere: Bool
        do { elsewhere = createsInShards ? try client.streamInfo(EngineNames.stream(id)) != nil : try existsInShard(id) } catch {
            throw Failure("cannot create room '\(id)': \(error)", mayPass: true)
        }
        if elsewhere { return false }
        return createsInShards ? try createInShard(id, tabs: tabs, recordLater: recordLater) : try createOwnStream(id, tabs: tabs)
    }

    /// Creates room `id` as a stream of its own (``RoomPlacement/streams``).
    private func createOwnStream(_ id: RoomID, tabs: [TabInfo]) throws(Failure) -> Bool {
        let stream = EngineNames.stream(id)
        // Another node may be creating the same stream, whose replicas are still electing
        // a leader: reading it times out for a moment.
        let made = try EngineRetry.standard.run("room '\(id)': creating its stream", log: log) { _ -> EngineRetry.Outcome<Bool> in
            do throws(EngineError) {
                _ = try client.ensureStream(name: stream, subjects: [EngineNames.subject(id)], replicas: replicas,
                                            maxMessages: 100_000, duplicateWindowSeconds: 120)
                return .done(true)
            } catch { return .again("not answered yet (\(error))") }
        }
        guard made != nil else { throw Failure("cannot create room '\(id)': the engine does not make its stream") }
        let genesis = Genesis(epoch: Coordinator.newEpoch(), tabs: tabs)
        // A stream just created is not ready at once (its replicas elect a leader).
        let created = try EngineRetry.standard.run("room '\(id)': creating", log: log) { attempt -> EngineRetry.Outcome<Bool> in
            let msgID = "genesis-\(id)-\(genesis.epoch)"
            // Sealed; and, on a node that requires seals, the room's seal mark: every later
            // message of the room must be sealed too.
            // A node that seals bound to the room's life marks it so from the start.
            let mark: String? = trust.acceptUnsigned ? nil : EngineNames.lifeMarkValue
            let seal = trust.sealStream(subject: EngineNames.subject(id), life: genesis.epoch, bound: trust.sealsLives(), kind: "genesis", follows: 0,
                                        node: name, incarnation: incarnation,
                                        messageID: msgID, forwards: nil, sealMark: mark, body: genesis.bytes)
            var headers = [(EngineNames.kindHeader, "genesis"), (EngineNames.nodeHeader, name), (EngineNames.incarnationHeader, incarnation),
                           (EngineNames.sealHeader, seal)]
            if let mark { headers.append((EngineNames.sealMarkHeader, mark)) }
            switch client.publish(subject: EngineNames.subject(id), data: genesis.bytes, headers: headers, expectedLastSeq: 0, msgID: msgID) {
            case .stored: return .done(true) // a duplicate is this call's own earlier attempt
            case .wrongLastSequence:
                // An earlier attempt of this call may be what stands at seq 1 (see
                // EngineClient.holds): then the room is this call's.
                guard attempt > 1 else { return .done(false) }
                do throws(EngineError) { return .done(try client.holds(msgID: msgID, at: 1, in: stream)) } catch {
                    return .again("cannot read its first message yet (\(error))")
                }
            case let .unknown(why): return .again("no answer yet (\(why))")
            case let .failed(why): return .again("refused for now (\(why))")
            }
        }
        guard let created else { throw Failure("cannot create room '\(id)': the engine does not answer") }
        return created
    }

    /// Deletes room `id` (its stream and snapshot) and tells every node; false if unknown.
    public func deleteRoom(_ id: RoomID) throws(Failure) -> Bool {
        let inShard: Bool
        do { inShard = try existsInShard(id) } catch { throw Failure("cannot delete room '\(id)': \(error)") }
        if inShard { return try deleteFromShard(id) }
        do {
            let created = try client.streamInfo(EngineNames.stream(id))?.created
            let existed = try client.deleteStream(EngineNames.stream(id))
            // The snapshot goes with a tombstone: an empty message on its subject.
            _ = client.publish(subject: EngineNames.snapshotSubject(id), data: [])
            // The notice names the stream deleted (by its creation time): a replay cannot
            // close a room created again since.
            if let created {
                let subject = EngineNames.deletedPrefix + id
                client.publishCore(subject: subject, data: trust.sealCore(.deletion, subject: subject, args: [String(created)]))
            }
            return existed
        } catch { throw Failure("cannot delete room '\(id)': \(error)") }
    }

    /// Loads room `id`: its latest snapshot (else its first message) and every batch
    /// after it, then follows its stream. Blocks until caught up (call it off the pool).
    /// The read is tried `attempts` times while the engine answers errors, pausing the
    /// thread between tries (``loadPause(after:)``); a failure that ``Failure/mayPass``
    /// comes after the last. With `attempts: 1`, the caller pauses between tries itself
    /// and holds no thread meanwhile.
    ///
    /// A room in a stream of its own is moved into its shard first by a node that creates
    /// rooms in shards, and by any node once its move has begun (docs/CLUSTER.md, "Moving an
    /// existing cluster to shards").
    public func openRoom(_ id: RoomID, resumeWindow: Int, attempts: Int = ClusterNode.loadAttempts) throws(Failure) -> ClusterRoom {
        if let room = try ClusterRoom.openInShard(node: self, room: id, resumeWindow: resumeWindow, attempts: attempts) { return room }
        let own = try ClusterRoom.openOwnStream(node: self, room: id, resumeWindow: resumeWindow, attempts: attempts)
        guard createsInShards || own.movedOut else { return own }
        do { try own.moveIntoShard() } catch {
            own.close()
            throw error
        }
        own.close()
        guard let room = try ClusterRoom.openInShard(node: self, room: id, resumeWindow: resumeWindow, attempts: attempts) else {
            throw Failure("room '\(id)' was moved into its shard, which does not hold it", mayPass: true)
        }
        return room
    }
}
