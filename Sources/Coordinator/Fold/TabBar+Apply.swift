extension TabBar {
    /// What an event does to the order and the selection: the only code that changes
    /// them, live (in ``Coordinator``) and on replay. Throws, changing nothing, when the
    /// event does not fit. Events of one tab leave the bar as it is.
    public mutating func apply(_ event: Event) throws(FoldError) {
        switch event {
        case let .selected(from, to):
            guard from == selected, contains(to) else {
                throw FoldError("selected from '\(from)' to '\(to)', but '\(selected)' is selected")
            }
            selected = to
        case let .tabAdded(tab, index):
            guard !contains(tab.id), index >= 0, index <= order.count else {
                throw FoldError("tabAdded '\(tab.id)' at \(index) to \(order.count) tabs")
            }
            order.insert(tab.id, at: index)
        case let .tabMoved(tab, index):
            guard let from = order.firstIndex(of: tab), index >= 0, index < order.count else {
                throw FoldError("tabMoved '\(tab)' to \(index)")
            }
            order.insert(order.remove(at: from), at: index)
        case let .tabRemoved(tab):
            guard let i = order.firstIndex(of: tab), order.count > 1 else { throw FoldError("tabRemoved '\(tab)'") }
            order.remove(at: i)
            // When it was selected, the batch's next event (`selected`) names the new selection.
        case .firstAppear, .appear, .disappear, .pushed, .popped, .scrollToTop, .scrolled, .valueSet, .tabUpdated,
             .clientJoined, .clientLeft:
            break
        }
    }
}
