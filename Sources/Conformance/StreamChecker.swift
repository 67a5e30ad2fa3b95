import Coordinator

/// Checks the lifecycle rules of SEMANTICS.md over a stream, batch by batch, and keeps
/// the replayed state: appear/disappear alternate, one visible page (the selected tab's
/// top) at the end of every batch, firstAppear once per page and right before its first
/// appear, the scroll-to-top counter never decreasing, seqs gap-free; and presence: its
/// events caused by `tabd`, each mode's events only in that mode (the fold), and no client
/// id handed out twice (a `clientJoined` or a reserved block never reaches back into an id
/// handed out or reserved before).
public struct StreamChecker {
    public private(set) var state: Snapshot
    private var shown: (tab: TabID, page: PageID)?
    private var firstAppeared: Set<PageID> = []
    public private(set) var batches = 0
    /// Every client number handed out or reserved so far lies below this.
    private var nextClient = 0
    /// The reserved blocks, and the ids of them that have been listed (a cluster's node
    /// lists its counted clients again when another node listed the room anew).
    private var blocks: [Range<Int>] = []
    private var listedFromBlocks: Set<Int> = []

    public init(origin: Snapshot) {
        state = origin
        for client in origin.clients { nextClient = max(nextClient, (Int(client.id.dropFirst()) ?? 0) + 1) }
        for tab in origin.tabs { for page in tab.stack where page.appeared { firstAppeared.insert(page.id) } }
        if origin.tabs.contains(where: { $0.stack.contains(where: \.appeared) }) { shown = origin.visiblePage }
    }

    public mutating func check(_ batch: EventBatch) throws {
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
            case let .clientJoined(client):
                let n = Int(client.id.dropFirst()) ?? -1
                if n < nextClient {
                    // Only an id of a reserved block, listed for the first time.
                    guard blocks.contains(where: { $0.contains(n) }), listedFromBlocks.insert(n).inserted else {
                        throw ReplayError(seq: e.seq, message: "client id \(client.id) was handed out before")
                    }
                } else {
                    nextClient = n + 1
                }
            case let .clientIdsReserved(_, from, count):
                guard from >= nextClient else { throw ReplayError(seq: e.seq, message: "ids from c\(from) reach into ids handed out before") }
                nextClient = from + count
                blocks.append(from..<(from + count))
            default: break
            }
            if e.event.isPresence, batch.by != Coordinator.daemonID {
                throw ReplayError(seq: e.seq, message: "\(e.event.kind) caused by \(batch.by), not by tabd")
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
