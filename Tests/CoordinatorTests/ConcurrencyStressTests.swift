import Testing
@testable import Coordinator
@testable import TabdProtocol

/// Collects a subscription's batches until it reaches `lastSeq` (or the stream ends).
func collect(_ sub: Subscription, through lastSeq: @escaping @Sendable () async -> Int?) async -> [EventBatch] {
    var batches: [EventBatch] = []
    if case let .replay(missed) = sub.start { batches = missed }
    if let target = await lastSeq(), batches.last?.lastSeq == target { return batches }
    for await batch in sub.batches {
        batches.append(batch)
        if let target = await lastSeq(), batch.lastSeq >= target { break }
    }
    return batches
}

/// Holds the final seq once the storm is over, for the collectors to stop at.
actor FinalSeq {
    var value: Int?
    func set(_ v: Int) { value = v }
}

@Suite struct ConcurrencyStressTests {
    /// 64 tasks fire random commands (all kinds, tabs added, moved and removed) at one
    /// coordinator while three subscribers, a late resumer and snapshot readers watch.
    @Test(arguments: [1, 2, 3, 42, 2026] as [UInt64])
    func randomCommandsFromManyTasksKeepEveryGuarantee(seed: UInt64) async throws {
        let tasks = 64, commandsPerTask = 150
        let c = try Coordinator(configuration: .init(resumeWindow: 100_000))
        let final = FinalSeq()
        let target: @Sendable () async -> Int? = { await final.value }
        let subs = [await c.subscribe(after: 0, bufferLimit: 1_000_000),
                    await c.subscribe(after: 0, bufferLimit: 1_000_000),
                    await c.subscribe(after: 0, bufferLimit: 1_000_000)]

        let (results, snapshots, lateStart) = await { () async -> ([(EventBatch?, ClientID, String)], ([Snapshot], [[EventBatch]]), (Int, [EventBatch])) in
            let collectors = subs.map { sub in Task { await collect(sub, through: target) } }
            // Commands, each task with its own seeded generator; every outcome is checked.
            let outcomes = Task {
                await withTaskGroup(of: [(EventBatch?, ClientID, String)].self) { inner in
                    for t in 0..<tasks {
                        inner.addTask {
                            var rng = SeededRandom(seed: seed &* 1_000_003 &+ UInt64(t))
                            var mine: [(EventBatch?, ClientID, String)] = []
                            for i in 0..<commandsPerTask {
                                let ref = "t\(t)-\(i)"
                                if case let .applied(_, batch)? = try? await c.execute(randomCommand(&rng), by: "c\(t)", ref: ref) {
                                    mine.append((batch, "c\(t)", ref))
                                }
                            }
                            return mine
                        }
                    }
                    var all: [(EventBatch?, ClientID, String)] = []
                    for await part in inner { all += part }
                    return all
                }
            }
            // Readers in the middle of the storm: snapshots and a late subscriber.
            let readers = Task {
                var seen: [Snapshot] = []
                for _ in 0..<20 { seen.append(await c.snapshot()) }
                return seen
            }
            let late = Task { () -> (Int, [EventBatch]) in
                let at = await c.currentSeq
                let sub = await c.subscribe(after: at, bufferLimit: 1_000_000)
                return (at, await collect(sub, through: target))
            }
            let results = await outcomes.value
            await final.set(await c.currentSeq)
            // Wake collectors that wait for one more batch: a ping changes nothing, so publish one presence batch.
            _ = try? await c.presence(joining: [.init(name: "closer")])
            await final.set(await c.currentSeq)
            var streams: [[EventBatch]] = []
            for collector in collectors { streams.append(await collector.value) }
            return (results, (await readers.value, streams), await late.value)
        }()
        let streams = snapshots.1
        let finalSnapshot = await c.snapshot()

        // (b) every subscriber received the identical sequence
        #expect(streams.count == 3)
        for s in streams.dropFirst() { #expect(s == streams[0], "seed \(seed): subscribers disagree") }
        let stream = streams[0]
        // (a) gap-free seqs from 1, batches never empty
        let seqs = stream.flatMap { $0.events.map(\.seq) }
        #expect(seqs == Array(1...finalSnapshot.seq), "seed \(seed): seqs have gaps or repeats")
        // (c)+(d) replaying through the pure model reproduces the final snapshot, invariants on every prefix
        var checker = StreamChecker(origin: c.origin)
        do { for b in stream { try checker.check(b) } } catch { Issue.record("seed \(seed): \(error)") }
        #expect(checker.state == finalSnapshot, "seed \(seed): replay differs from the coordinator's snapshot")
        // Every applied command's batch is in the stream with its sender and ref.
        let byRef = Dictionary(stream.compactMap { b in b.ref.map { ($0, b) } }, uniquingKeysWith: { a, _ in a })
        for (batch, client, ref) in results {
            guard let batch else { continue }
            #expect(batch.by == client && batch.ref == ref)
            #expect(byRef[ref] == batch, "seed \(seed): \(ref)'s batch is not in the stream as returned")
        }
        // Snapshots taken mid-storm are exactly the replay at their seq.
        var prefix = Snapshot?.none
        var model = c.origin
        var index = 0
        for snap in snapshots.0.sorted(by: { $0.seq < $1.seq }) {
            while model.seq < snap.seq { try model.apply(stream[index]); index += 1 }
            #expect(model == snap, "seed \(seed): a snapshot at \(snap.seq) is not the replay at that seq")
            prefix = snap
        }
        _ = prefix
        // The late subscriber got exactly the global suffix after the seq it asked for.
        let suffix = stream.drop { $0.lastSeq <= lateStart.0 }
        #expect(Array(suffix) == lateStart.1, "seed \(seed): a late subscriber's stream is not the global one")
    }
}
