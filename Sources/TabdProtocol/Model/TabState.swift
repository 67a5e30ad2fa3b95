/// One tab's whole state, and the decisions of the rules that concern one tab
/// (seeds 000, 002, 003).
///
/// A plain value: ``TabActor`` owns one per tab. Every rule here only *decides*: it
/// reads the state and returns the events a command causes, or throws, and changes
/// nothing. The events change the state through ``apply(_:selected:)``
/// (`TabState+Apply.swift`), the one place where a tab changes. `visible` tells a
/// rule whether this tab is the selected one: only its top page is the visible page.
public struct TabState: Sendable, Equatable, Identifiable {
    public var info: TabInfo
    /// `stack[0]` is the root page, the last entry the top. Never empty.
    public var stack: [Page]
    public var scroll: Double
    public var values: [String: JSONValue]

    public init(info: TabInfo, stack: [Page], scroll: Double = 0, values: [String: JSONValue] = [:]) {
        precondition(!stack.isEmpty, "a tab always has its root page")
        self.info = info; self.stack = stack; self.scroll = scroll; self.values = values
    }

    /// A new tab whose stack holds only its root page, which has not appeared yet.
    public init(info: TabInfo, rootPage: PageID) {
        self.init(info: info, stack: [Page(id: rootPage, route: Page.rootRoute)])
    }

    public var id: TabID { info.id }
    public var top: Page { stack[stack.count - 1] }

    // MARK: Lifecycle

    /// The top page becomes the visible page: `[firstAppear]`, `appear`.
    public func appearEvents() -> [Event] { Self.appearEvents(of: top, in: id) }

    private static func appearEvents(of page: Page, in tab: TabID) -> [Event] {
        page.appeared ? [.appear(tab: tab, page: page.id)]
                      : [.firstAppear(tab: tab, page: page.id), .appear(tab: tab, page: page.id)]
    }

    /// The top page stops being the visible page.
    public func disappearEvent() -> Event { .disappear(tab: id, page: top.id) }

    // MARK: Navigation

    /// Pushing a page. Visible: `pushed`, `disappear P`, `firstAppear Q`, `appear Q`;
    /// otherwise only `pushed` (the page appears when the tab is next selected).
    public func pushEvents(route: String, page: PageID, visible: Bool) throws(CommandError) -> [Event] {
        try Limits.validateRoute(route)
        guard stack.count < Limits.maxStackDepth else {
            throw .invalid("tab '\(id)' already has \(Limits.maxStackDepth) pages")
        }
        let pushed = Event.pushed(tab: id, page: page, route: route)
        guard visible else { return [pushed] }
        return [pushed, disappearEvent()] + Self.appearEvents(of: Page(id: page, route: route), in: id)
    }

    /// Popping the top page; nothing at depth 1. Visible: `disappear P`, `popped [P]`,
    /// `[firstAppear Q]`, `appear Q`; otherwise `popped [top]`.
    public func popEvents(visible: Bool) -> [Event] {
        guard stack.count > 1 else { return [] }
        return removalEvents(keeping: stack.count - 1, visible: visible)
    }

    /// Popping everything above the root; nothing at depth 1.
    public func popToRootEvents(visible: Bool) -> [Event] {
        guard stack.count > 1 else { return [] }
        return removalEvents(keeping: 1, visible: visible)
    }

    /// Removing `stack[keep...]`, reported top first.
    private func removalEvents(keeping keep: Int, visible: Bool) -> [Event] {
        let popped = Event.popped(tab: id, pages: stack[keep...].reversed().map(\.id))
        guard visible else { return [popped] }
        return [disappearEvent(), popped] + Self.appearEvents(of: stack[keep - 1], in: id)
    }

    // MARK: Scroll and values

    public func scrollEvents(to offset: Double) throws(CommandError) -> [Event] {
        try Limits.validateOffset(offset)
        return [.scrolled(tab: id, offset: offset)]
    }

    /// Setting (or, with `.null`, removing) a retained value. Emitted even when nothing changes.
    public func setEvents(key: String, value: JSONValue) throws(CommandError) -> [Event] {
        try Limits.validateKey(key)
        try Limits.validateValue(value)
        if !value.isNull, values[key] == nil, values.count >= Limits.maxKeysPerTab {
            throw .invalid("tab '\(id)' already holds \(Limits.maxKeysPerTab) keys")
        }
        return [.valueSet(tab: id, key: key, value: value)]
    }

    /// The fields an `updateTab` gives; `tabUpdated` only when something changes.
    public func updateEvents(_ update: TabUpdate) throws(CommandError) -> [Event] {
        var next = info
        if let title = update.title { try Limits.validateTitle(title); next.title = title }
        if let icon = update.icon { try Limits.validateIcon(icon); next.icon = icon }
        if let color = update.color { next.color = try Limits.normalizeColor(color) }
        if let badge = update.badge { try Limits.validateBadge(badge); next.badge = badge }
        guard next != info else { return [] }
        var updated = self
        updated.info = next
        return [.tabUpdated(updated)]
    }
}
