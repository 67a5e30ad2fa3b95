import Coordinator
import Outbox
import Dispatch
import Locking
import StateStore
import WebSockets

/// How rooms come to exist (`--rooms`).
public enum RoomCreation: String, Sendable, CaseIterable {
    /// The first join or API command of an unknown room creates it.
    case auto
    /// Only `PUT /api/rooms/ID` creates rooms.
    case api
}

/// Why a room cannot be taken.
package enum RoomRefusal: Error, Sendable {
    /// No such room, and it may not be created here.
    case unknown
    /// The room exists (for a creation).
    case exists
    /// `--max-rooms` rooms exist.
    case full
    /// The room is being deleted.
    case deleting
}

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
    typealias Creation = RoomCreation

    struct Settings: Sendable {
        var creation: Creation = .auto
        var maxRooms = 100_000
        /// Seconds without users before a room is unloaded; 0 = never.
        var idleSeconds = 300
        /// The tabs of a new room.
        var template: [TabInfo] = TabInfo.defaults
        var resumeWindow = 10_000
        /// Calls per second over the HTTP API, per room (0 = no limit).
        var rateLimit = 100
        /// Bytes per second over the HTTP API, per room, the answers' included (0 = no limit).
        var byteRateLimit = 0
        /// `--presence-limit` and `--presence-interval` (milliseconds).
        var presenceLimit = Limits.maxClientsInSnapshot
        var presenceIntervalMS = 1_000
        /// `--max-room-bytes`: what a room's state may weigh.
        var maxStateBytes = Coordinator.Configuration.defaultMaxStateBytes
        /// `--queue-bytes`: what may wait for a reader of an event stream that does not read.
        var streamBytes = 8 << 20
    }

    typealias Refusal = RoomRefusal

    typealias IdleCheck = RoomDirectory<Room>.IdleCheck

    private struct State {
        var directory: RoomDirectory<Room>
        var server: WebSocketServer?
        weak var gateway: Gateway?
    }

    let settings: Settings
    /// Where rooms live: memory, the state file or a cluster's engine.
    let home: any RoomHome
    let metrics: Metrics
    let log: Log
    /// Time for the rooms: their timers and what they read of the time.
    let clock: any RoomClock
    private let state: Locked<State>

    /// The events webhooks deliver and `GET /api/events` streams (nil: none kept, a cluster).
    let outbox: Outbox?
    /// The same when the rooms write it themselves (`--state :memory:`: no state file's
    /// writer writes it in its transactions); nil otherwise.
    let memoryOutbox: Outbox?
    /// The state file, if rooms are stored in one (its writer's `tabd_commit_seconds`).
    let store: StateStore?

    /// `home`: where rooms live; by default memory (or `store`, the state file). `outbox`:
    /// the outbox (with rooms in memory, they write it).
    init(settings: Settings, store: StateStore?, home: (any RoomHome)? = nil, existing: [RoomID], metrics: Metrics, log: Log,
         clock: any RoomClock = SystemRoomClock(), outbox: Outbox? = nil) {
        self.settings = settings
        self.clock = clock
        self.outbox = outbox
        self.store = store
        if let home {
            self.home = home
            self.memoryOutbox = nil
        } else if let store {
            self.home = StateFileHome(store: store)
            self.memoryOutbox = nil
        } else {
            self.home = MemoryHome(defaultTabs: settings.template, outbox: outbox)
            self.memoryOutbox = outbox
        }
        self.metrics = metrics
        self.log = log
        let rules = RoomDirectory<Room>.Settings(creation: settings.creation, maxRooms: settings.maxRooms, idle: .seconds(settings.idleSeconds))
        state = Locked(State(directory: RoomDirectory(settings: rules, existing: existing)))
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

    var counts: (loaded: Int, stored: Int) { state.withLock { ($0.directory.loadedCount, $0.directory.existing.count) } }

    /// Whether rooms outlive their time in memory (a state file or an engine).
    var persistent: Bool { home.persistent }

    /// A room another writer of the home created is unknown here until asked: asks the
    /// home (``RoomHome/stored(_:)``), and remembers the room if it exists.
    private func learn(_ id: RoomID) {
        guard home.learnsRooms, !state.withLock({ $0.directory.isKnown(id) }) else { return }
        if home.stored(id) { state.withLock { $0.directory.learn(id) } }
    }

    /// Whether room `id` is loaded on this node now.
    func isLoaded(_ id: RoomID) -> Bool { state.withLock { $0.directory.loadedRoom(id) != nil } }

    /// Every loaded room (for the sweep of a shared log).
    var loadedRooms: [Room] { state.withLock { $0.directory.loadedRooms } }

    /// Room `id` if it is loaded here now.
    func loadedRoom(_ id: RoomID) -> Room? { state.withLock { $0.directory.loadedRoom(id) } }

    // MARK: Taking and releasing rooms

    /// Whether a connection to `id` would be let in (the upgrade's answer): nil if so.
    func admission(_ id: RoomID) -> Refusal? {
        if settings.creation == .api { learn(id) }
        return state.withLock { $0.directory.admission(id) }
    }

    /// The room `id` for one more user: the loaded one, or a new incarnation that loads
    /// it. With `creating`, an unknown room is created (from `template`, else the
    /// default tabs); `exclusive` refuses a room that exists.
    func acquire(_ id: RoomID, creating: Bool, template: [TabInfo]? = nil, exclusive: Bool = false) -> Result<Room, Refusal> {
        if !creating || exclusive { learn(id) }
        let result = state.withLock { s -> Result<RoomDirectory<Room>.Acquired, Refusal> in
            guard let server = s.server else { return .failure(.unknown) }
            return s.directory.acquire(id, creating: creating, exclusive: exclusive) { channel, predecessor, creates in
                Room(id: id, channel: channel, registry: self, server: server,
                     template: creates ? (template ?? settings.template) : nil, predecessor: predecessor)
            }
        }
        switch result {
        case let .success(.loaded(room)):
            return .success(room)
        case let .success(.new(room, _)):
            Task { await room.run() }
            return .success(room)
        case let .failure(refusal):
            return .failure(refusal)
        }
    }

    /// `n` users are done with `room`; true when it has no user left and no idle check is
    /// on its way (the caller arms one).
    func release(_ room: Room, _ n: Int) -> Bool {
        let now = clock.now
        return state.withLock { $0.directory.release(room, n, now: now) }
    }

    /// Removes `room` from the directory if it has been without users for `--room-idle`.
    func retireIfIdle(_ room: Room) -> IdleCheck {
        let now = clock.now
        return state.withLock { $0.directory.idleCheck(room, now: now) }
    }

    /// A retired incarnation has written everything and forgotten its state.
    func retired(_ room: Room) {
        state.withLock { $0.directory.retired(room) }
    }

    /// `room` could not be loaded or created: it leaves the directory (a room it was to
    /// create does not exist).
    func failed(_ room: Room) {
        state.withLock { $0.directory.failed(room, persistent: persistent, wasCreating: room.isCreating) }
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
        // A room another writer created since this one started is unknown here until asked.
        if home.learnsRooms { await offPool { self.learn(id) } }
        let taken = state.withLock { $0.directory.beginDeletion(id) }
        guard let (loaded, retiring) = taken else { return .unknown }
        if let loaded {
            let done = OneShot<Void>()
            loaded.submit([.delete(done)])
            await done.wait()
            await loaded.finished.wait()
        }
        if let retiring { await retiring.finished.wait() }
        do { try await home.delete(id) } catch {
            // Its clients are gone, its state is not: it stays, and can be loaded again.
            log.error("room '\(id)' could not be deleted: \(error)", LogFields(room: id, kind: "state"))
            state.withLock { $0.directory.endDeletion(id, deleted: false) }
            return .failed(error.description)
        }
        state.withLock { $0.directory.endDeletion(id, deleted: true) }
        log.info("room '\(id)' deleted", LogFields(room: id))
        return .deleted
    }

    /// Another writer deleted room `id`, as the home said while `found` was its incarnation
    /// here (nil: none was loaded): its clients here are closed with 4404 and it is
    /// forgotten (the home's state is gone already). An incarnation loaded after that
    /// answer is not closed on its strength: it checks its own standing.
    func deletedElsewhere(_ id: RoomID, found: Room?) async {
        switch state.withLock({ $0.directory.deletedElsewhere(id, found: found) }) {
        case .deletingHere, .forgotten(nil): return
        case let .loadedSince(room): room.submit([.verifyStanding])
        case let .forgotten(loaded?):
            let done = OneShot<Void>()
            loaded.submit([.delete(done)])
            await done.wait()
            log.info("room '\(id)' was deleted by another node", LogFields(room: id))
        }
    }

    // MARK: Listing

    /// The rooms after `after`, in id order, at most `limit`, and whether more follow.
    func list(after: RoomID?, limit: Int) async throws(RoomLoadError) -> (rooms: [RoomListing], more: Bool) {
        var rows: [(id: RoomID, seq: Int?)]
        if home.persistent {
            rows = try await home.list(after: after, limit: limit + 1)
        } else {
            rows = state.withLock { s in s.directory.existing.filter { after == nil || $0 > after! }.sorted().prefix(limit + 1).map { ($0, nil) } }
        }
        let more = rows.count > limit
        rows = Array(rows.prefix(limit))
        let loaded = state.withLock { s in rows.map { s.directory.loadedRoom($0.id) } }
        let rooms = zip(rows, loaded).map { row, room in
            RoomListing(id: row.id, clients: room?.clientCount.load(ordering: .relaxed) ?? 0,
                        seq: max(room?.publishedSeq.load(ordering: .relaxed) ?? 0, row.seq ?? 0), loaded: room != nil)
        }
        return (rooms, more)
    }

    /// The daemon stops: every loaded room takes what is left in its inbox, waits for its
    /// last commits and ends.
    func stopAll() async {
        let rooms = state.withLock { $0.directory.everyRoom }
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
