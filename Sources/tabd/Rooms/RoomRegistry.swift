import Cluster
import Coordinator
import Dispatch
import Locking
import StateStore
import WebSockets

/// Which rooms exist and which are loaded: the daemon's directory of rooms.
///
/// Called from the sockets' thread (is this room there? take a room for a connection)
/// and from the rooms, always briefly under one lock, never waiting. Per-room work never
/// scans the directory: every call looks up one room.
///
/// Users. Every connection and every HTTP call that uses a room is counted from
/// ``acquire(_:creating:template:)`` until the room has processed its end (the leave,
/// the answer) and calls ``release(_:_:)``. A room whose users drop to zero is checked
/// again after `--room-idle` and, still unused, retires: it leaves the directory, writes
/// its last batches and forgets its state. A join meanwhile makes a new incarnation,
/// which waits for the old one to finish before it reads the state file.
final class RoomRegistry: Sendable {
    enum Creation: String, Sendable {
        /// The first join or API command of an unknown room creates it.
        case auto
        /// Only `PUT /api/rooms/ID` creates rooms.
        case api
    }

    struct Settings: Sendable {
        var creation: Creation = .auto
        var maxRooms = 100_000
        /// Seconds without users before a room is unloaded; 0 = never.
        var idleSeconds = 300
        /// The tabs of a new room.
        var template: [TabInfo] = TabInfo.defaults
        var resumeWindow = 10_000
        /// Commands per second over the HTTP API, per room (0 = no limit).
        var rateLimit = 100
    }

    enum Refusal: Error, Sendable {
        /// No such room, and it may not be created here.
        case unknown
        /// The room exists (for a creation).
        case exists
        /// `--max-rooms` rooms exist.
        case full
        /// The room is being deleted.
        case deleting
    }

    private struct Entry {
        let room: Room
        var users: Int
        /// When the users last dropped to zero.
        var idleSince: ContinuousClock.Instant?
        /// An idle check is on its way (one at a time).
        var timerArmed = false
    }

    /// What an idle check finds.
    enum IdleCheck: Sendable {
        /// The room leaves the registry: it unloads.
        case retire
        /// Idle, but not for long enough: check again after this long.
        case checkAgain(after: Duration)
        /// It has users again (the next drop to zero arms a new check).
        case inUse
    }

    private struct State {
        /// Every room that exists (stored, or in memory).
        var existing: Set<RoomID>
        var loaded: [RoomID: Entry] = [:]
        /// Incarnations that left the directory and are still writing their last batches.
        var retiring: [RoomID: Room] = [:]
        var deleting: Set<RoomID> = []
        var nextChannel: UInt64 = 1
        var server: WebSocketServer?
        weak var gateway: Gateway?
    }

    let settings: Settings
    let store: StateStore?
    /// Set when this tabd is a node of a cluster: rooms live in the engine.
    let cluster: ClusterNode?
    let metrics: Metrics
    let log: Log
    private let state: Locked<State>

    init(settings: Settings, store: StateStore?, cluster: ClusterNode? = nil, existing: [RoomID], metrics: Metrics, log: Log) {
        self.settings = settings
        self.store = store
        self.cluster = cluster
        self.metrics = metrics
        self.log = log
        state = Locked(State(existing: Set(existing)))
    }

    /// The server and gateway, once they exist (they are made after the registry).
    func attach(server: WebSocketServer, gateway: Gateway) {
        state.withLock { $0.server = server; $0.gateway = gateway }
    }

    var gateway: Gateway? { state.withLock { $0.gateway } }
    var server: WebSocketServer? { state.withLock { $0.server } }

    /// Closes a connection (one whose room could not be taken).
    func close(_ connection: ConnectionID, code: CloseCode, reason: String) {
        state.withLock { $0.server }?.close(connection, code: code, reason: reason)
    }

    var counts: (loaded: Int, stored: Int) { state.withLock { ($0.loaded.count, $0.existing.count) } }

    /// Whether rooms outlive their time in memory (a state file or a cluster's engine).
    var persistent: Bool { store != nil || cluster != nil }

    /// In a cluster, a room another node created is unknown here until asked: asks the
    /// engine, and remembers the room if it exists. Not while the engine is unreachable:
    /// the question would hold the caller (an upgrade on the service thread) for the
    /// whole request timeout, and the room could not be loaded anyway.
    private func learn(_ id: RoomID) {
        guard let cluster, cluster.connected,
              !state.withLock({ $0.existing.contains(id) || $0.deleting.contains(id) }) else { return }
        if (try? cluster.roomExists(id)) == true { state.withLock { _ = $0.existing.insert(id) } }
    }

    /// Every loaded room (for the cluster's sweep).
    var loadedRooms: [Room] { state.withLock { $0.loaded.values.map(\.room) } }

    // MARK: Taking and releasing rooms

    /// Whether a connection to `id` would be let in (the upgrade's answer): nil if so.
    func admission(_ id: RoomID) -> Refusal? {
        if settings.creation == .api { learn(id) }
        return state.withLock { s in
            if s.deleting.contains(id) { return .deleting }
            if s.existing.contains(id) { return nil }
            if settings.creation == .api { return .unknown }
            return s.existing.count >= settings.maxRooms ? .full : nil
        }
    }

    /// The room `id` for one more user: the loaded one, or a new incarnation that loads
    /// it. With `creating`, an unknown room is created (from `template`, else the
    /// default tabs); `exclusive` refuses a room that exists.
    func acquire(_ id: RoomID, creating: Bool, template: [TabInfo]? = nil, exclusive: Bool = false) -> Result<Room, Refusal> {
        if !creating || exclusive { learn(id) }
        let result = state.withLock { s -> Result<(Room, isNew: Bool), Refusal> in
            if s.deleting.contains(id) { return .failure(.deleting) }
            let exists = s.existing.contains(id)
            if exists, exclusive { return .failure(.exists) }
            if exists, var entry = s.loaded[id] {
                entry.users += 1
                entry.idleSince = nil
                s.loaded[id] = entry
                return .success((entry.room, false))
            }
            if !exists {
                guard creating else { return .failure(.unknown) }
                guard s.existing.count < settings.maxRooms else { return .failure(.full) }
                s.existing.insert(id)
            }
            guard let server = s.server else { return .failure(.unknown) }
            let channel = ChannelID(rawValue: s.nextChannel)
            s.nextChannel += 1
            let room = Room(id: id, channel: channel, registry: self, server: server,
                            template: exists ? nil : (template ?? settings.template), predecessor: s.retiring[id])
            s.loaded[id] = Entry(room: room, users: 1)
            return .success((room, true))
        }
        switch result {
        case let .success((room, isNew)):
            if isNew { Task { await room.run() } }
            return .success(room)
        case let .failure(refusal):
            return .failure(refusal)
        }
    }

    /// `n` users are done with `room`; true when it has no user left and no idle check is
    /// on its way (the caller arms one).
    func release(_ room: Room, _ n: Int) -> Bool {
        state.withLock { s in
            guard var entry = s.loaded[room.id], entry.room === room else { return false }
            entry.users = max(0, entry.users - n)
            var arm = false
            if entry.users == 0 {
                entry.idleSince = .now
                arm = !entry.timerArmed
                entry.timerArmed = true
            }
            s.loaded[room.id] = entry
            return arm
        }
    }

    /// Removes `room` from the directory if it has been without users for `--room-idle`.
    func retireIfIdle(_ room: Room) -> IdleCheck {
        state.withLock { s in
            guard var entry = s.loaded[room.id], entry.room === room else { return .inUse }
            guard entry.users == 0, let since = entry.idleSince else {
                entry.timerArmed = false
                s.loaded[room.id] = entry
                return .inUse
            }
            let left = .seconds(settings.idleSeconds) - since.duration(to: .now)
            if left > .milliseconds(50) { return .checkAgain(after: left) }
            s.loaded[room.id] = nil
            s.retiring[room.id] = room
            return .retire
        }
    }

    /// A retired incarnation has written everything and forgotten its state.
    func retired(_ room: Room) {
        state.withLock { s in
            if s.retiring[room.id] === room { s.retiring[room.id] = nil }
        }
    }

    /// `room` could not be loaded or created: it leaves the directory (a room it was to
    /// create does not exist).
    func failed(_ room: Room) {
        state.withLock { s in
            guard let entry = s.loaded[room.id], entry.room === room else { return }
            s.loaded[room.id] = nil
            s.retiring[room.id] = room
            if !persistent || room.isCreating { s.existing.remove(room.id) }
        }
    }

    // MARK: Deleting

    enum Deletion: Sendable {
        case deleted
        case unknown
        /// The state file could not be changed: the room is still there.
        case failed(String)
    }

    /// Deletes a room: closes its clients with 4404, forgets it, removes its state.
    func delete(_ id: RoomID) async -> Deletion {
        let taken = state.withLock { s -> (Room?, Room?)? in
            guard s.existing.contains(id), !s.deleting.contains(id) else { return nil }
            s.deleting.insert(id)
            s.existing.remove(id)
            let loaded = s.loaded.removeValue(forKey: id)?.room
            return (loaded, s.retiring[id])
        }
        guard let (loaded, retiring) = taken else { return .unknown }
        if let loaded {
            let done = Completion()
            loaded.submit([.delete(done)])
            await done.wait()
            await loaded.finished.wait()
        }
        if let retiring { await retiring.finished.wait() }
        if let cluster {
            do { _ = try await offPool { () throws(ClusterNode.Failure) in try cluster.deleteRoom(id) } } catch {
                log.error("room '\(id)' could not be deleted: \(error)")
                state.withLock { s in
                    s.deleting.remove(id)
                    s.existing.insert(id)
                }
                return .failed(error.description)
            }
        } else if let store {
            do { _ = try await store.deleteRoom(id) } catch {
                // Its clients are gone, its state is not: it stays, and can be loaded again.
                log.error("room '\(id)' could not be deleted: \(error.message)")
                state.withLock { s in
                    s.deleting.remove(id)
                    s.existing.insert(id)
                }
                return .failed(error.message)
            }
        }
        state.withLock { _ = $0.deleting.remove(id) }
        log.info("room '\(id)' deleted")
        return .deleted
    }

    /// Cluster: rooms deleted by other nodes are closed here too, and every second each
    /// loaded room checks for clients of nodes that died. Keep the returned timer.
    func followCluster(_ cluster: ClusterNode) throws(ClusterNode.Failure) -> any DispatchSourceTimer {
        try cluster.onDeletion { [weak self] id in Task { await self?.deletedElsewhere(id) } }
        // Deletion notices sent while this node was cut off from the engine are lost: on
        // reconnecting, every loaded room's stream is checked.
        cluster.onReconnect { [weak self] in
            for room in self?.loadedRooms ?? [] { room.submit([.verifyStream]) }
        }
        let sweep = DispatchSource.makeTimerSource(queue: .global())
        sweep.schedule(deadline: .now() + 1, repeating: 1)
        sweep.setEventHandler { [weak self] in
            for room in self?.loadedRooms ?? [] { room.submit([.sweep]) }
        }
        sweep.resume()
        return sweep
    }

    /// Another node deleted room `id`: its clients here are closed with 4404 and it is
    /// forgotten (the engine's state is gone already).
    func deletedElsewhere(_ id: RoomID) async {
        let taken = state.withLock { s -> Room?? in
            guard !s.deleting.contains(id) else { return nil } // this node is deleting it
            s.existing.remove(id)
            return .some(s.loaded.removeValue(forKey: id)?.room)
        }
        guard let taken, let loaded = taken else { return }
        let done = Completion()
        loaded.submit([.delete(done)])
        await done.wait()
        log.info("room '\(id)' was deleted by another node")
    }

    // MARK: Listing

    /// The rooms after `after`, in id order, at most `limit`, and whether more follow.
    func list(after: RoomID?, limit: Int) async throws(StoreError) -> (rooms: [RoomListing], more: Bool) {
        var rows: [(id: RoomID, seq: Int?)]
        if let cluster {
            let ids = (try? await offPool { () throws(ClusterNode.Failure) in try cluster.roomIDs() }) ?? []
            rows = ids.filter { after == nil || $0 > after! }.prefix(limit + 1).map { ($0, nil) }
        } else if let store {
            rows = try await store.listRooms(after: after, limit: limit + 1).map { ($0.id, $0.seq) }
        } else {
            rows = state.withLock { s in s.existing.filter { after == nil || $0 > after! }.sorted().prefix(limit + 1).map { ($0, nil) } }
        }
        let more = rows.count > limit
        rows = Array(rows.prefix(limit))
        let loaded = state.withLock { s in rows.map { s.loaded[$0.id]?.room } }
        let rooms = zip(rows, loaded).map { row, room in
            RoomListing(id: row.id, clients: room?.clientCount.load(ordering: .relaxed) ?? 0,
                        seq: max(room?.publishedSeq.load(ordering: .relaxed) ?? 0, row.seq ?? 0), loaded: room != nil)
        }
        return (rooms, more)
    }

    /// The daemon stops: every loaded room takes what is left in its inbox, waits for its
    /// last commits and ends.
    func stopAll() async {
        let rooms = state.withLock { s in Array(s.loaded.values.map(\.room)) + Array(s.retiring.values) }
        for room in rooms { room.inbox.finish() }
        for room in rooms { await room.finished.wait() }
    }
}

struct RoomListing: Sendable {
    let id: RoomID
    let clients: Int
    let seq: Int
    let loaded: Bool
}
