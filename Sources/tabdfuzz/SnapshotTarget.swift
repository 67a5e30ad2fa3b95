import Conformance
import Coordinator

/// What a state file's room holds, without SQLite: line 1 a snapshot (`Snapshot(json:)`,
/// optionally with `"next_page"`/`"next_client"` members standing for those columns), the
/// next lines `events` frames (`ServerFrame(bytes:)`), read and folded as
/// `StateStore.load` does; then what tabd does with a loaded room: a coordinator restores
/// it, starts, welcomes a client and runs a few commands. Never a trap; a snapshot that
/// reads writes a JSON form that reads back as the same snapshot.
enum SnapshotTarget {
    static func run(_ bytes: [UInt8]) {
        let lines = pieces(bytes, separator: 0x0A, limit: 16)
        guard let json = try? JSONParser.parse(lines[0]), let snapshot = try? Snapshot(json: json) else { return }
        roundTrip(snapshot)
        guard let stored = load(snapshot, json: json, frames: Array(lines.dropFirst())) else { return }
        blocking { await restore(stored) }
    }

    static func roundTrip(_ snapshot: Snapshot) {
        let text = snapshot.json(capped: false).compactBytes
        do {
            let again = try Snapshot(json: try JSONParser.parse(text))
            require(again == snapshot, "the snapshot does not round-trip")
        } catch { require(false, "the snapshot's own JSON is refused: \(error)") }
        // Every frame that carries it reads back too.
        let frame = ServerFrame.snapshot(ref: "r", snapshot.capped)
        do { _ = try ServerFrame(bytes: frame.bytes) } catch { require(false, "its snapshot frame is refused: \(error)") }
    }

    /// `StateStore.load`'s checks and fold, on an already-read snapshot and batch frames.
    static func load(_ snapshot: Snapshot, json: JSONValue, frames: [[UInt8]]) -> StoredState? {
        guard !snapshot.tabs.isEmpty, snapshot.tab(snapshot.selected) != nil else { return nil }
        let nextPage = json["next_page"]?.intValue ?? 1 + snapshot.tabs.reduce(0) { $0 + $1.stack.count }
        let nextClient = json["next_client"]?.intValue ?? 1 + snapshot.clients.count
        var state = StoredState(epoch: "00000000000000ff", snapshot: snapshot, nextPage: nextPage, nextClient: nextClient, history: [])
        let floor = max(0, snapshot.seq)
        var history: [EventBatch] = []
        for frame in frames where !frame.isEmpty {
            guard case let .events(batch)? = try? ServerFrame(bytes: frame) else { return nil }
            if batch.firstSeq > floor {
                do { try state.apply(batch) } catch { return nil }
            }
            history.append(batch)
        }
        var kept: [EventBatch] = []
        for batch in history.reversed() {
            if let next = kept.last, next.firstSeq != batch.lastSeq + 1 { break }
            if kept.isEmpty, batch.lastSeq != state.snapshot.seq { break }
            kept.append(batch)
        }
        state.history = kept.reversed()
        return state
    }

    /// What tabd does with a loaded room (Sources/tabd/Rooms/Room.swift), then a client.
    static func restore(_ stored: StoredState) async {
        let store = MemoryStore(stored)
        let coordinator = Coordinator(restoring: stored, durability: store)
        do { try await coordinator.start() } catch { return }
        guard let welcome = try? await coordinator.connect(.init(name: "fuzz", resume: stored.history.first.map { $0.firstSeq &- 1 })) else { return }
        _ = ServerFrame.welcome(welcome, server: "tabd").bytes
        let me = welcome.client.id
        let tabs = await coordinator.snapshot().tabs.map(\.id)
        // Every kind on the restored tabs (and one that is new), in an order of the input's own.
        var rng = SeededRandom(seed: UInt64(truncatingIfNeeded: stored.snapshot.seq))
        let pool = Array(tabs.prefix(4)) + ["fuzz-new"]
        for kind in CommandKind.allCases + CommandKind.allCases.shuffled(using: &rng) {
            _ = try? await coordinator.execute(randomCommand(kind, &rng, tabs: pool), by: me)
        }
        _ = await coordinator.snapshot().json.compactBytes
        try? await coordinator.disconnect(me)
    }
}
