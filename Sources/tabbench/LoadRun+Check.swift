import Conformance
import Coordinator

extension LoadRun {
    /// The stream checks, room by room: every client of a room got the same frames in the same
    /// order as the room's reference client; tabd: seqs gap-free (checked as frames arrived),
    /// the lifecycle invariants hold on the reference's stream, and its replay from its
    /// welcome equals the room's final `sync`. `frames` is the number of frames chained,
    /// summed over the rooms' references.
    static func check(_ s: BenchClient.State, options: BenchOptions, frames: inout Int) -> [String] {
        var problems: [String] = []
        for (i, c) in s.conns.enumerated() where c.problem != nil {
            problems.append("client \(i): \(c.problem!)")
            if problems.count > 3 { break }
        }
        if s.wrongRoom > 0 { problems.append("\(s.wrongRoom) welcomes named another room than the one asked for") }
        let rooms = options.layout.rooms
        guard s.conns.count >= rooms else { return problems + ["fewer clients than rooms"] }
        frames = (0..<rooms).reduce(0) { $0 + s.conns[$1].chained }
        let differing = s.conns.filter { c in
            let reference = s.conns[c.room]
            return c.close == nil && (c.chained != reference.chained || c.chain != reference.chain)
        }
        if let one = differing.first {
            let where_ = rooms == 1 ? "client 0" : "their room's first client"
            problems.append("\(differing.count) clients received other frames than \(where_) (e.g. \(one.chained) vs \(s.conns[one.room].chained))")
        }
        guard options.server == .tabd else { return problems }
        for room in 0..<rooms {
            let prefix = rooms == 1 ? "" : "room \(RoomLayout.name(room)): "
            guard let origin = s.referenceOrigin[room], let sync = s.sync[room] else {
                problems.append(prefix + "no welcome or sync to check against")
                continue
            }
            if let problem = replay(s.reference[room], from: origin, against: sync) {
                problems.append(prefix + problem)
                if problems.count > 8 { break }
            }
        }
        return problems
    }

    /// Replays `frames` (a client's events frames after its welcome) from `origin` with the
    /// conformance checker; nil when every invariant holds and the replay equals `sync`.
    private static func replay(_ frames: [[UInt8]], from origin: Snapshot, against sync: Snapshot) -> String? {
        var checker = StreamChecker(origin: origin)
        for bytes in frames {
            guard case let .events(batch)? = try? ServerFrame(bytes: bytes) else { return "a frame that does not parse" }
            do { try checker.check(batch) } catch { return "\(error)" }
            if batch.lastSeq == sync.seq { break }
        }
        if checker.state.seq != sync.seq {
            return "the reference client reached seq \(checker.state.seq), the sync is at \(sync.seq)"
        }
        if checker.state.capped != sync {
            return "the replay differs from the sync snapshot at seq \(sync.seq)"
        }
        return nil
    }
}
