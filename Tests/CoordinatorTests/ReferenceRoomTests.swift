import Conformance
import Locking
import Testing
@testable import Coordinator
@testable import TabdProtocol

/// The coordinator (tab actors, its executor, its pipeline) and the room as a value
/// (``ReferenceRoom``: the same rules, the fold) decide the same events for the same
/// commands, refuse the same ones, and end in the same state: thousands of random
/// commands, several seeds.
@Suite struct ReferenceRoomTests {
    @Test(arguments: [UInt64(1), 2, 3, 4, 5])
    func theCoordinatorDecidesWhatTheValueModelDecides(seed: UInt64) async throws {
        let c = try Coordinator(tabs: TabInfo.defaults)
        var reference = ReferenceRoom(try StoredState.genesis(tabs: TabInfo.defaults, epoch: c.epoch))
        // The coordinator's first appear (a new history) is the model's start too.
        let start = await c.snapshot()
        let batches = Locked<[EventBatch]>([])
        await c.addObserver { batch in batches.withLock { $0.append(batch) } }
        reference = ReferenceRoom(StoredState(epoch: c.epoch, snapshot: start, nextPage: reference.state.nextPage, nextClient: 1, history: []))
        var rng = SeededRandom(seed: seed)
        var refused = 0
        for n in 0..<1_500 {
            let command = randomCommand(&rng)
            let before = batches.withLock { $0.count }
            let live: Result<Void, CommandError>
            do { _ = try await c.execute(command, by: "c1", ref: "r\(n)"); live = .success(()) } catch { live = .failure(error) }
            let model: Result<[Event], CommandError>
            do { model = .success(try reference.run(command, by: "c1", ref: "r\(n)")) } catch { model = .failure(error) }
            let liveEvents = batches.withLock { $0[before...].flatMap(\.events).map(\.event) }
            switch (live, model) {
            case (.success, let .success(events)):
                #expect(liveEvents == events, "command \(n): \(command)")
            case let (.failure(a), .failure(b)):
                refused += 1
                #expect(a == b, "command \(n): \(command)")
                #expect(liveEvents.isEmpty)
            default:
                Issue.record("command \(n): \(command): the coordinator \(live), the model \(model)")
            }
        }
        let end = await c.snapshot()
        var modelEnd = reference.state.snapshot
        modelEnd.clients = end.clients // the coordinator's roster is not the model's business
        #expect(end == modelEnd)
        #expect(refused > 0 && refused < 1_500, "random commands are refused some of the time, not always")
    }
}
