extension TabBar {
    /// What an event does to the order and the selection: the only code that changes
    /// them, live (in ``Coordinator``) and on replay. Throws, changing nothing, when the
    /// event does not fit. Events of one tab leave the bar as it is.
    ///
    /// Returns what it did to the order, so that a list kept in the bar's order (a
    /// snapshot's tabs) makes the same edit without deciding it again.
    @discardableResult
    public mutating func apply(_ event: Event) throws(FoldError) -> OrderChange {
        guard event.part == .bar else { return .none }
        switch event {
        case let .selected(from, to):
            guard from == selected, contains(to) else {
                throw FoldError("selected from '\(from)' to '\(to)', but '\(selected)' is selected")
            }
            selected = to
            return .none
        case let .tabAdded(tab, index):
            guard !contains(tab.id), index >= 0, index <= order.count else {
                throw FoldError("tabAdded '\(tab.id)' at \(index) to \(order.count) tabs")
            }
            order.insert(tab.id, at: index)
            return .inserted(at: index)
        case let .tabMoved(tab, index):
            guard let from = order.firstIndex(of: tab), index >= 0, index < order.count else {
                throw FoldError("tabMoved '\(tab)' to \(index)")
            }
            order.insert(order.remove(at: from), at: index)
            return .moved(from: from, to: index)
        case let .tabRemoved(tab):
            guard let i = order.firstIndex(of: tab), order.count > 1 else { throw FoldError("tabRemoved '\(tab)'") }
            order.remove(at: i)
            // When it was selected, the batch's next event (`selected`) names the new selection.
            return .removed(at: i)
        default:
            preconditionFailure("\(event.kind) is declared of the bar but has no rule in it")
        }
    }
}

/// What an event did to the tab order (``TabBar/apply(_:)``), to be made to a list kept in
/// the same order.
public enum OrderChange: Sendable, Equatable {
    case none
    case inserted(at: Int)
    case moved(from: Int, to: Int)
    case removed(at: Int)

    /// Makes the same edit to `list`; `inserted` puts `new()` in.
    public func apply<Element>(to list: inout [Element], inserting new: () -> Element) {
        switch self {
        case .none: break
        case let .inserted(at): list.insert(new(), at: at)
        case let .moved(from, to): list.insert(list.remove(at: from), at: to)
        case let .removed(at): list.remove(at: at)
        }
    }
}
