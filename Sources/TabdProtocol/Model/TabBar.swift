/// The tab order and the selection, and the decisions of the rules of the bar itself.
///
/// Owned by the ``Coordinator`` actor; the tabs' own state lives in ``TabActor``s.
/// Like ``TabState`` it only decides here; events change it through
/// ``apply(_:)`` (`TabBar+Apply.swift`).
public struct TabBar: Sendable, Equatable {
    /// Tab ids in display order. Never empty.
    public package(set) var order: [TabID]
    /// The selected tab. Between a `tabRemoved` of the selected tab and the `selected`
    /// event that follows it in the same batch, it still names the removed tab.
    public package(set) var selected: TabID

    public init(order: [TabID], selected: TabID) {
        precondition(!order.isEmpty && order.contains(selected), "the bar has tabs and one of them is selected")
        self.order = order
        self.selected = selected
    }

    /// A bar taken from a snapshot as it is, even mid-batch (for the fold).
    init(unchecked order: [TabID], selected: TabID) {
        self.order = order
        self.selected = selected
    }

    public func contains(_ id: TabID) -> Bool { order.contains(id) }

    public func index(of id: TabID) -> Int? { order.firstIndex(of: id) }

    /// Where a new tab would go, or `invalid` (too many tabs, duplicate id, index out of 0…count).
    public func insertionIndex(for id: TabID, at index: Int?) throws(CommandError) -> Int {
        guard !contains(id) else { throw .invalid("a tab '\(id)' already exists") }
        guard order.count < Limits.maxTabs else { throw .invalid("at most \(Limits.maxTabs) tabs") }
        let at = index ?? order.count
        guard at >= 0, at <= order.count else { throw .invalid("index must be 0…\(order.count), got \(at)") }
        return at
    }

    /// Moving a tab: `tabMoved`, or nothing when it is already there. `index` must be 0…count−1.
    public func moveEvents(_ id: TabID, to index: Int) throws(CommandError) -> [Event] {
        guard let from = order.firstIndex(of: id) else { throw .unknownTab(id) }
        guard index >= 0, index < order.count else { throw .invalid("index must be 0…\(order.count - 1), got \(index)") }
        return from == index ? [] : [.tabMoved(tab: id, index: index)]
    }

    /// Checks that `id` may be removed (it exists and is not the last tab).
    public func checkRemovable(_ id: TabID) throws(CommandError) {
        guard contains(id) else { throw .unknownTab(id) }
        guard order.count > 1 else { throw .invalid("cannot remove the last tab") }
    }

    /// The tab selected once `id` is removed, when `id` is the selected tab: the one
    /// that takes its place, else the one before it. Nil when `id` is not selected.
    public func successor(ofRemoved id: TabID) -> TabID? {
        guard id == selected, let i = order.firstIndex(of: id), order.count > 1 else { return nil }
        return i + 1 < order.count ? order[i + 1] : order[i - 1]
    }
}
