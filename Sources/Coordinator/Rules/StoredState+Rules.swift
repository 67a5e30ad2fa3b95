/// How a history begins, and what a stored state must hold for a coordinator to continue
/// it: the rules every store (the state file, the cluster's engine) and the in-memory
/// coordinator share, written once beside the fold.
extension Snapshot {
    /// The state before any event of a new history: every tab at its root page, `p1`…`pN`
    /// in the order given, the first tab selected, seq 0. Refuses an empty list, more than
    /// ``Limits/maxTabs`` tabs, a duplicate id or a tab outside the limits.
    public static func origin(tabs infos: [TabInfo]) throws(CommandError) -> Snapshot {
        guard !infos.isEmpty else { throw .invalid("there must be at least one tab") }
        guard infos.count <= Limits.maxTabs else { throw .invalid("at most \(Limits.maxTabs) tabs") }
        var states: [TabState] = []
        for (i, info) in infos.enumerated() {
            let info = try Limits.validate(info)
            guard !states.contains(where: { $0.id == info.id }) else { throw .invalid("duplicate tab id '\(info.id)'") }
            states.append(TabState(info: info, rootPage: "p\(i + 1)"))
        }
        return Snapshot(seq: 0, selected: states[0].id, scrollToTop: 0, tabs: states, clients: [])
    }
}

extension StoredState {
    /// A new history of `tabs` before its first event (``Snapshot/origin(tabs:)``): the next
    /// page is the one after the root pages, the next client `c1`, nothing retained.
    public static func genesis(tabs: [TabInfo], epoch: String) throws(CommandError) -> StoredState {
        let origin = try Snapshot.origin(tabs: tabs)
        return StoredState(epoch: epoch, snapshot: origin, nextPage: origin.tabs.count + 1, nextClient: 1, history: [])
    }

    /// Why a coordinator could not continue this state (it would trap or hand out an id
    /// twice), or nil: it must have a tab, select one of its tabs, and hand out page and
    /// client numbers within ``Limits/maxCount``. (``Snapshot/init(json:)`` has refused
    /// duplicates and counts out of range already.)
    public var unrestorableReason: String? {
        if snapshot.tabs.isEmpty || snapshot.tab(snapshot.selected) == nil {
            return "the snapshot has no tabs or selects a tab it does not have"
        }
        if !(1...Limits.maxCount).contains(nextPage) || !(1...Limits.maxCount).contains(nextClient) {
            return "page or client counter out of range"
        }
        return nil
    }
}
