import Cluster
import Dispatch

extension RoomRegistry {
    /// A node of a cluster: rooms deleted by other nodes are closed here too, commands other
    /// nodes forward reach their rooms, and every second each loaded room checks for clients
    /// of nodes that died. Keep the returned timer.
    func followCluster(_ cluster: ClusterNode) throws(ClusterNode.Failure) -> any DispatchSourceTimer {
        // A deletion notice is sealed and recent, yet a replay of one within its lifetime is
        // possible: what it changes is decided by the engine (the room gone from its shard or
        // created again), never by the notice alone.
        try cluster.onDeletion { [weak self] id, _ in
            guard let self else { return }
            if let loaded = loadedRoom(id) {
                loaded.submit([.verifyStanding])
            } else {
                DispatchQueue.global().async { [weak self] in
                    guard (try? cluster.roomExists(id)) == false else { return }
                    Task { await self?.deletedElsewhere(id, found: nil) }
                }
            }
        }
        // Deletion notices sent while this node was cut off from the engine are lost: on
        // reconnecting, every loaded room's standing is checked.
        cluster.onReconnect { [weak self] in
            for room in self?.loadedRooms ?? [] { room.submit([.verifyStanding]) }
        }
        // Commands other nodes forward to this one go to the room if it is open here (a
        // node that is not the room's writer any more refuses them: the sender decides
        // them itself); answers go to the room that forwarded.
        try cluster.onForwards(requests: { [weak self] requests in
            for (room, group) in Self.grouped(requests, \.room) {
                if let loaded = self?.loadedRoom(room) {
                    loaded.submit(group.map { .peer(ForwardedCommand(request: $0, node: cluster)) })
                } else {
                    for (reply, asked) in Self.grouped(group, \.reply) {
                        cluster.answer(asked.map { ForwardAnswer(id: $0.id, room: room, refused: "room '\(room)' is not open here") }, to: reply)
                    }
                }
            }
        }, answers: { [weak self] answers in
            for (room, group) in Self.grouped(answers, \.room) {
                self?.loadedRoom(room)?.submit(group.map { .peer(ForwardedAnswer(answer: $0)) })
            }
        })
        let sweep = DispatchSource.makeTimerSource(queue: .global())
        sweep.schedule(deadline: .now() + 1, repeating: 1)
        sweep.setEventHandler { [weak self] in
            for room in self?.loadedRooms ?? [] { room.submit([.sweep]) }
        }
        sweep.resume()
        return sweep
    }

    /// `items` grouped by `key`, each group in its order, the groups in order of first appearance.
    private static func grouped<T>(_ items: [T], _ key: (T) -> String) -> [(String, [T])] {
        var order: [String] = []
        var groups: [String: [T]] = [:]
        for item in items {
            let k = key(item)
            if groups[k] == nil { order.append(k) }
            groups[k, default: []].append(item)
        }
        return order.map { ($0, groups[$0]!) }
    }
}
