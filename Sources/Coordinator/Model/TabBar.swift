/// The tab order and the selection: the rules of the bar itself, as a plain value.
///
/// Owned by the ``Coordinator`` actor; the tabs' own state lives in ``TabActor``s.
public struct TabBar: Sendable, Equatable {
    /// Tab ids in display order. Never empty.
    public private(set) var order: [TabID]
    /// Exactly one tab is selected.
    public private(set) var selected: TabID

    public init(order: [TabID], selected: TabID) {
        precondition(!order.isEmpty && order.contains(selected), "the bar has tabs and one of them is selected")
        self.order = order
        self.selected = selected
    }

    public func contains(_ id: TabID) -> Bool { order.contains(id) }

    public func index(of id: TabID) -> Int? { order.firstIndex(of: id) }

    /// Changes the selection; false if `id` was already selected.
    public mutating func select(_ id: TabID) -> Bool {
        precondition(contains(id))
        guard id != selected else { return false }
        selected = id
        return true
    }

    /// Where a new tab would go, or `invalid` (too many tabs, duplicate id, index out of 0…count).
    public func insertionIndex(for id: TabID, at index: Int?) throws(CommandError) -> Int {
        guard !contains(id) else { throw .invalid("a tab '\(id)' already exists") }
        guard order.count < Limits.maxTabs else { throw .invalid("at most \(Limits.maxTabs) tabs") }
        let at = index ?? order.count
        guard at >= 0, at <= order.count else { throw .invalid("index must be 0…\(order.count), got \(at)") }
        return at
    }

    public mutating func insert(_ id: TabID, at index: Int) { order.insert(id, at: index) }

    /// Moves a tab; returns false when it is already there. `index` must be 0…count−1.
    public mutating func move(_ id: TabID, to index: Int) throws(CommandError) -> Bool {
        guard let from = order.firstIndex(of: id) else { throw .unknownTab(id) }
        guard index >= 0, index < order.count else { throw .invalid("index must be 0…\(order.count - 1), got \(index)") }
        guard from != index else { return false }
        order.remove(at: from)
        order.insert(id, at: index)
        return true
    }

    /// Checks that `id` may be removed (it exists and is not the last tab).
    public func checkRemovable(_ id: TabID) throws(CommandError) {
        guard contains(id) else { throw .unknownTab(id) }
        guard order.count > 1 else { throw .invalid("cannot remove the last tab") }
    }

    /// Removes a tab. If it was selected, the tab that took its place (else the one
    /// before it) becomes selected, and is returned.
    public mutating func remove(_ id: TabID) -> TabID? {
        let i = order.firstIndex(of: id)!
        order.remove(at: i)
        guard id == selected else { return nil }
        selected = order[i < order.count ? i : i - 1]
        return selected
    }
}
