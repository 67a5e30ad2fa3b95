import Coordinator
import WebSockets

/// Which rooms exist, which are loaded and by how many users, which are retiring or being
/// deleted: the registry's rules as a value, with the time passed in, so their life cycle
/// (creation, idle unloading, a new incarnation while the old one retires, deletion) is
/// tested without waiting. ``RoomRegistry`` keeps one under its lock and does the I/O.
///
/// `R` is the room (``Room`` in the daemon): the directory reads its id and compares identities.
package struct RoomDirectory<R: DirectoryRoom> {
    package typealias Refusal = RoomRefusal

    package struct Settings: Sendable {
        package var creation: RoomCreation = .auto
        package var maxRooms = 100_000
        /// How long a room stays loaded without users; zero: for ever.
        package var idle: Duration = .seconds(300)

        package init(creation: RoomCreation = .auto, maxRooms: Int = 100_000, idle: Duration = .seconds(300)) {
            self.creation = creation; self.maxRooms = maxRooms; self.idle = idle
        }
    }

    private struct Entry {
        let room: R
        var users: Int
        /// When the users last dropped to zero.
        var idleSince: ContinuousClock.Instant?
        /// An idle check is on its way (one at a time).
        var checkPending = false
    }

    /// What an idle check finds.
    package enum IdleCheck: Equatable, Sendable {
        /// The room leaves the directory: it unloads.
        case retire
        /// Idle, but not for long enough: check again after this long.
        case checkAgain(after: Duration)
        /// It has users again (the next drop to zero asks for a new check).
        case inUse
    }

    package let settings: Settings
    /// Every room that exists (stored, or in memory).
    package private(set) var existing: Set<RoomID>
    private var loaded: [RoomID: Entry] = [:]
    /// Incarnations that left the directory and are still writing their last batches.
    private var retiring: [RoomID: R] = [:]
    private var deleting: Set<RoomID> = []
    private var nextChannel: UInt64 = 1

    package init(settings: Settings, existing: some Sequence<RoomID>) {
        self.settings = settings
        self.existing = Set(existing)
    }

    package var loadedCount: Int { loaded.count }
    package var loadedRooms: [R] { loaded.values.map(\.room) }
    /// Every incarnation in memory, loaded or retiring.
    package var everyRoom: [R] { loaded.values.map(\.room) + Array(retiring.values) }
    package func loadedRoom(_ id: RoomID) -> R? { loaded[id]?.room }
    package func users(of id: RoomID) -> Int? { loaded[id]?.users }
    package func isDeleting(_ id: RoomID) -> Bool { deleting.contains(id) }
    package func isKnown(_ id: RoomID) -> Bool { existing.contains(id) || deleting.contains(id) }

    /// A room the home holds that another writer created, learnt from the home.
    package mutating func learn(_ id: RoomID) { existing.insert(id) }

    // MARK: Taking and releasing rooms

    /// Whether a connection to `id` would be let in: nil if so.
    package func admission(_ id: RoomID) -> Refusal? {
        if deleting.contains(id) { return .deleting }
        if existing.contains(id) { return nil }
        if settings.creation == .api { return .unknown }
        return existing.count >= settings.maxRooms ? .full : nil
    }

    /// What ``acquire(_:creating:exclusive:make:)`` found.
    package enum Acquired {
        /// The loaded room, with one more user.
        case loaded(R)
        /// A new incarnation, made by `make`: the caller starts it. `creates` when the room
        /// did not exist (it is to be created from a template).
        case new(R, creates: Bool)
    }

    /// The room `id` for one more user: the loaded one, or a new incarnation made by
    /// `make(channel, predecessor, creates)`, where `predecessor` is the incarnation still
    /// retiring (the new one waits for it). With `creating`, an unknown room is created;
    /// `exclusive` refuses a room that exists.
    package mutating func acquire(_ id: RoomID, creating: Bool, exclusive: Bool = false,
                          make: (_ channel: ChannelID, _ predecessor: R?, _ creates: Bool) -> R) -> Result<Acquired, Refusal> {
        if deleting.contains(id) { return .failure(.deleting) }
        let exists = existing.contains(id)
        if exists, exclusive { return .failure(.exists) }
        if exists, var entry = loaded[id] {
            entry.users += 1
            entry.idleSince = nil
            loaded[id] = entry
            return .success(.loaded(entry.room))
        }
        if !exists {
            guard creating else { return .failure(.unknown) }
            guard existing.count < settings.maxRooms else { return .failure(.full) }
            existing.insert(id)
        }
        let channel = ChannelID(rawValue: nextChannel)
        nextChannel += 1
        let room = make(channel, retiring[id], !exists)
        loaded[id] = Entry(room: room, users: 1)
        return .success(.new(room, creates: !exists))
    }

    /// `n` users are done with `room` at `now`; true when it has no user left and no idle
    /// check is on its way (the caller schedules one after ``Settings/idle``).
    package mutating func release(_ room: R, _ n: Int, now: ContinuousClock.Instant) -> Bool {
        guard var entry = loaded[room.id], entry.room === room else { return false }
        entry.users = max(0, entry.users - n)
        var schedule = false
        if entry.users == 0 {
            entry.idleSince = now
            schedule = !entry.checkPending
            entry.checkPending = true
        }
        loaded[room.id] = entry
        return schedule
    }

    /// The idle check of `room` at `now`: it retires (leaves the directory) if it has been
    /// without users for ``Settings/idle``, give or take 50 ms.
    package mutating func idleCheck(_ room: R, now: ContinuousClock.Instant) -> IdleCheck {
        guard var entry = loaded[room.id], entry.room === room else { return .inUse }
        guard entry.users == 0, let since = entry.idleSince else {
            entry.checkPending = false
            loaded[room.id] = entry
            return .inUse
        }
        let left = settings.idle - since.duration(to: now)
        if left > .milliseconds(50) { return .checkAgain(after: left) }
        loaded[room.id] = nil
        retiring[room.id] = room
        return .retire
    }

    /// A retired incarnation has written everything and forgotten its state.
    package mutating func retired(_ room: R) {
        if retiring[room.id] === room { retiring[room.id] = nil }
    }

    /// `room` could not be loaded or created: it leaves the directory, and so does the
    /// room itself when nothing keeps it (`persistent` false) or it was to be created.
    package mutating func failed(_ room: R, persistent: Bool, wasCreating: Bool) {
        guard let entry = loaded[room.id], entry.room === room else { return }
        loaded[room.id] = nil
        retiring[room.id] = room
        if !persistent || wasCreating { existing.remove(room.id) }
    }

    // MARK: Deleting

    /// Starts deleting `id`: it no longer exists for anyone; returns its loaded and its
    /// retiring incarnation (to be stopped and waited for), or nil when there is no such
    /// room or it is being deleted already.
    package mutating func beginDeletion(_ id: RoomID) -> (loaded: R?, retiring: R?)? {
        guard existing.contains(id), !deleting.contains(id) else { return nil }
        deleting.insert(id)
        existing.remove(id)
        return (loaded.removeValue(forKey: id)?.room, retiring[id])
    }

    /// The deletion of `id` is over: done, or failed (the room exists again).
    package mutating func endDeletion(_ id: RoomID, deleted: Bool) {
        deleting.remove(id)
        if !deleted { existing.insert(id) }
    }

    /// What became of another node's deletion of a room here.
    package enum ElsewhereDeletion {
        /// Forgotten here; its incarnation that was loaded, to close (nil when none was).
        case forgotten(R?)
        /// This node is deleting it itself.
        case deletingHere
        /// Another incarnation than the one found gone is loaded now (it loaded after the
        /// check): it is kept, and checks its own standing.
        case loadedSince(R)
    }

    /// Another node deleted `id`, as the engine said when `found` (the incarnation loaded
    /// then, nil when none was) was the one here: it is forgotten here, unless this node is
    /// deleting it itself or another incarnation loaded since.
    package mutating func deletedElsewhere(_ id: RoomID, found: R?) -> ElsewhereDeletion {
        guard !deleting.contains(id) else { return .deletingHere }
        if let now = loaded[id]?.room, now !== found { return .loadedSince(now) }
        existing.remove(id)
        return .forgotten(loaded.removeValue(forKey: id)?.room)
    }
}

/// What the directory needs of a room: its id.
package protocol DirectoryRoom: AnyObject {
    var id: RoomID { get }
}
