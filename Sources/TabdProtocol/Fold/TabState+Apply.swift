extension TabState {
    /// What an event does to one tab: the only code that changes a tab's state, live
    /// (in ``TabActor``), on load and replay (``Snapshot/apply(_:)-(SequencedEvent)``),
    /// and in tests and checkers. Throws, changing nothing, when the event does not fit.
    ///
    /// `selected` tells whether this tab is the selected one when the event happens:
    /// only the selected tab's top page can appear.
    public mutating func apply(_ event: Event, selected: Bool) throws(FoldError) {
        guard event.tabScope == id else { throw FoldError("\(event.kind) for tab '\(event.tabScope ?? "-")' applied to tab '\(id)'") }
        let last = stack.count - 1
        switch event {
        case let .firstAppear(_, page):
            guard stack[last].id == page, !stack[last].appeared else {
                throw FoldError("firstAppear of \(page), which is not a fresh top page of '\(id)'")
            }
            stack[last].appeared = true
        case let .appear(_, page):
            guard selected else { throw FoldError("appear on unselected tab '\(id)'") }
            guard stack[last].id == page, stack[last].appeared else {
                throw FoldError("appear of \(page), which is not the top of '\(id)' or never first-appeared")
            }
            stack[last].appearCount += 1
        case let .disappear(_, page):
            // It changes no state. Its place in the batch (after `selected`, after
            // `pushed`) is the lifecycle order, which StreamChecker checks.
            guard stack.contains(where: { $0.id == page }) else { throw FoldError("disappear of \(page), not a page of '\(id)'") }
        case let .pushed(_, page, route):
            guard !stack.contains(where: { $0.id == page }) else { throw FoldError("pushed \(page) twice on '\(id)'") }
            stack.append(Page(id: page, route: route))
        case let .popped(_, pages):
            let top = stack.suffix(pages.count).reversed().map(\.id)
            guard !pages.isEmpty, pages.count < stack.count, top == pages else {
                throw FoldError("popped \(pages) from '\(id)', but its top is \(top)")
            }
            stack.removeLast(pages.count)
        case .scrollToTop:
            // Seed 003: the list goes back to the top; the scroll-to-top counter is the bar's.
            scroll = 0
        case let .scrolled(_, offset):
            scroll = offset
        case let .valueSet(_, key, value):
            values[key] = value.isNull ? nil : value
        case let .tabUpdated(updated):
            info = updated.info
        default:
            preconditionFailure("\(event.kind) is declared of one tab but has no rule in it")
        }
    }
}
