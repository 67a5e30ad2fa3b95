import Testing
@testable import Coordinator

/// A coordinator with seed 001's tabs; after its first batch (seq 1–2) home's root p1
/// is visible. favorites' root is p2, profile's p3; the next page is p4.
func freshCoordinator(_ tabs: [TabInfo] = TabInfo.defaults) throws -> Coordinator {
    try Coordinator(tabs: tabs)
}

/// Runs a command that must succeed and returns its batch.
@discardableResult
func run(_ c: Coordinator, _ command: Command, by client: ClientID = "c1", ref: String? = "r") async throws -> EventBatch? {
    guard case let .applied(_, batch) = try await c.execute(command, by: client, ref: ref) else {
        Issue.record("\(command.type) did not apply")
        return nil
    }
    return batch
}

/// The events a batch should hold, with seqs from `first` on.
func sequenced(from first: Int, _ events: [Event]) -> [SequencedEvent] {
    events.enumerated().map { SequencedEvent(seq: first + $0.offset, event: $0.element) }
}

/// Expects a refused command with `code`, and the state untouched.
func expectRefused(_ c: Coordinator, _ command: Command, _ code: ErrorCode, sourceLocation: SourceLocation = #_sourceLocation) async {
    let before = await c.snapshot()
    do {
        _ = try await c.execute(command, by: "c1", ref: "bad")
        Issue.record("\(command) was accepted, expected \(code.rawValue)", sourceLocation: sourceLocation)
    } catch {
        #expect(error.code == code, "\(error.message)", sourceLocation: sourceLocation)
    }
    let after = await c.snapshot()
    #expect(after == before, "a refused command changed the state", sourceLocation: sourceLocation)
}

/// Checks the lifecycle rules of SEMANTICS.md over a stream, batch by batch, and keeps
/// the replayed state: appear/disappear alternate, one visible page (the selected tab's
/// top) at the end of every batch, firstAppear once per page and right before its first
/// appear, the counter never decreasing, seqs gap-free.
struct StreamChecker {
    private(set) var state: Snapshot
    private var shown: (tab: TabID, page: PageID)?
    private var firstAppeared: Set<PageID> = []
    private(set) var batches = 0

    init(origin: Snapshot) {
        state = origin
        for tab in origin.tabs { for page in tab.stack where page.appeared { firstAppeared.insert(page.id) } }
        if origin.tabs.contains(where: { $0.stack.contains(where: \.appeared) }) { shown = origin.visiblePage }
    }

    mutating func check(_ batch: EventBatch) throws {
        for (i, e) in batch.events.enumerated() {
            switch e.event {
            case let .firstAppear(tab, page):
                guard !firstAppeared.contains(page) else { throw ReplayError(seq: e.seq, message: "second firstAppear of \(page)") }
                firstAppeared.insert(page)
                guard i + 1 < batch.events.count, batch.events[i + 1].event == .appear(tab: tab, page: page) else {
                    throw ReplayError(seq: e.seq, message: "firstAppear of \(page) not followed by its appear")
                }
            case let .appear(tab, page):
                guard shown == nil else { throw ReplayError(seq: e.seq, message: "appear of \(page) while \(shown!.page) is visible") }
                guard firstAppeared.contains(page) else { throw ReplayError(seq: e.seq, message: "appear of \(page) before its firstAppear") }
                shown = (tab, page)
            case let .disappear(tab, page):
                guard let s = shown, s == (tab, page) else { throw ReplayError(seq: e.seq, message: "disappear of \(page), which is not visible") }
                shown = nil
            default: break
            }
            try state.apply(e)
        }
        batches += 1
        guard let s = shown, let v = state.visiblePage, s == v else {
            throw ReplayError(seq: batch.lastSeq, message: "after the batch, the visible page is not the selected tab's top")
        }
        guard state.tabs.filter({ $0.id == state.selected }).count == 1 else {
            throw ReplayError(seq: batch.lastSeq, message: "not exactly one selected tab")
        }
    }
}

import Foundation

extension String {
    func write(toFile path: String) throws {
        try Data(utf8).write(to: URL(fileURLWithPath: path))
    }
}
