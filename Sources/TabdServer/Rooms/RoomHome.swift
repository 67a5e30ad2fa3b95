import Coordinator
import Outbox
import StateStore

/// Where rooms live: memory (nothing outlives the daemon), the state file, or a cluster's
/// engine. A ``Room`` loads through its home and never asks which one it is; the
/// ``RoomRegistry`` lists and deletes through it.
protocol RoomHome: Sendable {
    /// Whether rooms outlive their time in memory (so an idle room may be unloaded).
    var persistent: Bool { get }

    /// Loads room `id`, or creates it from `template` when given, ready to serve: its
    /// coordinator started (the first appear of a new history published, the clients a
    /// restart forgot gone).
    func load(_ id: RoomID, template: [TabInfo]?, configuration: Coordinator.Configuration) async throws(RoomLoadError) -> LoadedRoom

    /// Stored rooms after `after` in id order, at most `limit`, with their last seq when
    /// the home knows it without loading them.
    func list(after: RoomID?, limit: Int) async throws(RoomLoadError) -> [(id: RoomID, seq: Int?)]

    /// Removes a room's whole state (its clients are gone).
    func delete(_ id: RoomID) async throws(RoomLoadError)

    /// Whether rooms can appear in the home without this tabd knowing (another writer
    /// created them): then ``stored(_:)`` is asked about a room unknown here.
    var learnsRooms: Bool { get }

    /// Whether room `id` is stored now, asked of the home itself (it may block for a read
    /// of the engine); false when the home cannot say now.
    func stored(_ id: RoomID) -> Bool
}

extension RoomHome {
    var learnsRooms: Bool { false }
    func stored(_ id: RoomID) -> Bool { false }
}

/// Why a room could not be loaded, listed or deleted: one line for the log.
struct RoomLoadError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A loaded room and what ties it to its home.
struct LoadedRoom: Sendable {
    let coordinator: Coordinator
    /// Whether this load created the room (a `PUT` of a room another node created first
    /// answers 409).
    let created: Bool
    /// A log other writers share (a cluster's engine): what it adds to the room; nil for a
    /// log only this room writes.
    let shared: (any SharedLog)?
    /// Writes what is left and lets go of the room's state (idle unloading, deletion).
    let unload: @Sendable () async -> Void
    /// The log line of the load, if it is worth one.
    let summary: String?
}

/// Nothing is kept: a room lives as long as the daemon and its directory entry.
struct MemoryHome: RoomHome {
    /// The tabs of a room loaded without a template (one whose earlier load failed).
    let defaultTabs: [TabInfo]
    /// Where a new room's `roomCreated` goes.
    var outbox: Outbox?

    var persistent: Bool { false }

    func load(_ id: RoomID, template: [TabInfo]?, configuration: Coordinator.Configuration) async throws(RoomLoadError) -> LoadedRoom {
        do {
            let coordinator = try Coordinator(tabs: template ?? defaultTabs, configuration: configuration)
            if let outbox, outbox.kinds.contains(.roomCreated) { outbox.append([.roomCreated(id, epoch: coordinator.epoch)]) }
            return LoadedRoom(coordinator: coordinator, created: true, shared: nil, unload: {}, summary: nil)
        } catch {
            throw RoomLoadError("room '\(id)': \(error.message)")
        }
    }

    func list(after: RoomID?, limit: Int) async throws(RoomLoadError) -> [(id: RoomID, seq: Int?)] { [] }

    func delete(_ id: RoomID) async throws(RoomLoadError) {}
}

/// The state file: every room's history and snapshots in one SQLite file.
struct StateFileHome: RoomHome {
    let store: StateStore

    var persistent: Bool { true }

    func load(_ id: RoomID, template: [TabInfo]?, configuration: Coordinator.Configuration) async throws(RoomLoadError) -> LoadedRoom {
        let opened: RoomStore
        do {
            if let template {
                opened = try await store.createRoom(id, tabs: template)
            } else {
                guard let stored = try await store.openRoom(id) else { throw RoomLoadError("room '\(id)' is not in the state file") }
                opened = stored
            }
        } catch let error as StoreError {
            throw RoomLoadError("room '\(id)': \(error.message)")
        } catch let error as RoomLoadError {
            throw error
        } catch {
            throw RoomLoadError("room '\(id)': \(error)")
        }
        let coordinator = Coordinator(restoring: opened.loaded, durability: opened, configuration: configuration)
        do { try await coordinator.start() } catch {
            await opened.unload()
            throw RoomLoadError("room '\(id)': \(error.message)")
        }
        return LoadedRoom(coordinator: coordinator, created: template != nil, shared: nil, unload: { await opened.unload() },
                          summary: template == nil
                              ? "room '\(id)' loaded: epoch \(coordinator.epoch), continuing at seq \(opened.loaded.snapshot.seq)"
                              : "room '\(id)' created: epoch \(coordinator.epoch)")
    }

    func list(after: RoomID?, limit: Int) async throws(RoomLoadError) -> [(id: RoomID, seq: Int?)] {
        do { return try await store.listRooms(after: after, limit: limit).map { ($0.id, $0.seq) } } catch {
            throw RoomLoadError(error.message)
        }
    }

    func delete(_ id: RoomID) async throws(RoomLoadError) {
        do { _ = try await store.deleteRoom(id) } catch { throw RoomLoadError(error.message) }
    }
}
