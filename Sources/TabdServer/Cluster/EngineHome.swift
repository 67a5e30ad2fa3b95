import Cluster
import Coordinator

/// A cluster's engine: rooms live in its shard streams (or, made by a tabd before shards,
/// in streams of their own), and every node that serves a room follows it.
struct EngineHome: RoomHome {
    let cluster: ClusterNode
    let resumeWindow: Int
    /// Clients' commands go to the room's writer (`--cluster-forwarding`).
    let forwarding: Bool

    var learnsRooms: Bool { true }

    /// Not while the engine is unreachable: the question would hold the caller (an upgrade
    /// on the service thread) for the whole request timeout, and the room could not be
    /// loaded anyway.
    func stored(_ id: RoomID) -> Bool {
        cluster.connected && (try? cluster.roomExists(id)) == true
    }

    var persistent: Bool { true }

    /// Creates the room in the engine if it is to be created (another node may have been
    /// first), reads it, and follows its stream; clients of dead nodes, and of this node in
    /// an earlier life, leave.
    func load(_ id: RoomID, template: [TabInfo]?, configuration: Coordinator.Configuration) async throws(RoomLoadError) -> LoadedRoom {
        let (cluster, window) = (cluster, resumeWindow)
        let room: ClusterRoom, created: Bool
        do {
            created = try await offPool { () throws(ClusterNode.Failure) -> Bool in
                guard let template else { return false }
                // Its directory record is stored while the room starts (below).
                return try cluster.createRoom(id, tabs: template, recordLater: true)
            }
            // While the engine answers errors (its stream being created, a leader being
            // elected), each read holds a thread only for itself: the pauses between them
            // hold none, however many rooms wait.
            var attempt = 1
            while true {
                do {
                    room = try await offPool { () throws(ClusterNode.Failure) in try cluster.openRoom(id, resumeWindow: window, attempts: 1) }
                    break
                } catch where error.mayPass && attempt < ClusterNode.loadAttempts {
                    try? await Task.sleep(for: ClusterNode.loadPause(after: attempt))
                    attempt += 1
                }
            }
        } catch {
            throw RoomLoadError("room '\(id)': \(error)")
        }
        var configuration = configuration
        configuration.node = cluster.name
        let coordinator = Coordinator(restoring: room.committedState(), durability: room, configuration: configuration)
        do { try await coordinator.start(forgetting: room.orphans(includingOwn: true), forgettingNodes: room.deadShares(includingOwn: true)) } catch {
            room.close()
            throw RoomLoadError("room '\(id)': \(error.message)")
        }
        // A room created here is listed once its creation is answered.
        if created { await offPool { room.recordStored() } }
        let seq = await coordinator.currentSeq
        return LoadedRoom(coordinator: coordinator, created: created, shared: SharedRoomLog(room: room, node: cluster, forwarding: forwarding),
                          unload: { room.close() },
                          summary: "room '\(id)' \(created ? "created" : "loaded") from the engine: epoch \(coordinator.epoch), at seq \(seq)")
    }

    func list(after: RoomID?, limit: Int) async throws(RoomLoadError) -> [(id: RoomID, seq: Int?)] {
        let cluster = cluster
        let ids: [RoomID]
        do { ids = try await offPool { () throws(ClusterNode.Failure) in try cluster.roomIDs() } } catch {
            throw RoomLoadError("\(error)")
        }
        return ids.sorted().filter { after == nil || $0 > after! }.prefix(limit).map { ($0, nil) }
    }

    func delete(_ id: RoomID) async throws(RoomLoadError) {
        let cluster = cluster
        do { _ = try await offPool { () throws(ClusterNode.Failure) in try cluster.deleteRoom(id) } } catch {
            throw RoomLoadError("\(error)")
        }
    }
}

/// A room's log in the cluster's engine, as the room sees it (``SharedLog``).
struct SharedRoomLog: SharedLog {
    let room: ClusterRoom
    let node: ClusterNode
    let forwarding: Bool

    func onForeignBatches(_ handler: @escaping @Sendable () -> Void) { room.onForeignBatches(handler) }

    func onEnded(_ handler: @escaping @Sendable () -> Void) { room.onGone(handler) }

    func standing() async -> RoomStanding? {
        let room = room
        switch try? await offPool({ () throws(ClusterNode.Failure) in try room.standing() }) {
        case .current?: return .current
        case .gone?: return .gone
        case .moved?: return .moved
        case nil: return nil
        }
    }

    func departed(includingOwn: Bool) -> (clients: Set<ClientID>, writers: Set<String>) {
        (room.orphans(includingOwn: includingOwn), room.deadShares(includingOwn: includingOwn))
    }

    func makeRouter(room id: RoomID, clock: any RoomClock) -> (any CommandRouter)? {
        ClusterCommandRouter(room: id, node: node, log: self, clock: clock, forwards: forwarding)
    }

    func abandon() { room.close() }
}
