/// One tab's whole state and the rules that change it (seeds 000, 002, 003).
///
/// A plain value: ``TabActor`` owns one per tab and the coordinator drives it, while
/// tests and the replay model use it directly. Every mutating rule validates first and
/// changes nothing when it throws. `visible` tells a rule whether this tab is the
/// selected one, because only the selected tab's top page is the visible page.
public struct TabState: Sendable, Equatable {
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
    public mutating func appear() -> [Event] {
        let last = stack.count - 1
        var events: [Event] = []
        if !stack[last].appeared {
            stack[last].appeared = true
            events.append(.firstAppear(tab: id, page: stack[last].id))
        }
        stack[last].appearCount += 1
        events.append(.appear(tab: id, page: stack[last].id))
        return events
    }

    /// The top page stops being the visible page.
    public func disappear() -> Event { .disappear(tab: id, page: top.id) }

    // MARK: Navigation

    /// Pushes a page. Visible: `pushed`, `disappear P`, `firstAppear Q`, `appear Q`;
    /// otherwise only `pushed` (the page appears when the tab is next selected).
    public mutating func push(route: String, page: PageID, visible: Bool) throws(CommandError) -> [Event] {
        try Limits.validateRoute(route)
        guard stack.count < Limits.maxStackDepth else {
            throw .invalid("tab '\(id)' already has \(Limits.maxStackDepth) pages")
        }
        var events: [Event] = [.pushed(tab: id, page: page, route: route)]
        if visible { events.append(disappear()) }
        stack.append(Page(id: page, route: route))
        if visible { events += appear() }
        return events
    }

    /// Pops the top page; nothing at depth 1. Visible: `disappear P`, `popped [P]`,
    /// `[firstAppear Q]`, `appear Q`; otherwise `popped [top]`.
    public mutating func pop(visible: Bool) -> [Event] {
        guard stack.count > 1 else { return [] }
        return removePages(down: stack.count - 1, visible: visible)
    }

    /// Pops everything above the root; nothing at depth 1.
    public mutating func popToRoot(visible: Bool) -> [Event] {
        guard stack.count > 1 else { return [] }
        return removePages(down: 1, visible: visible)
    }

    /// Removes `stack[keep...]`, reporting them top first.
    private mutating func removePages(down keep: Int, visible: Bool) -> [Event] {
        var events: [Event] = []
        if visible { events.append(disappear()) }
        let removed = stack[keep...].reversed().map(\.id)
        stack.removeSubrange(keep...)
        events.append(.popped(tab: id, pages: removed))
        if visible { events += appear() }
        return events
    }

    // MARK: Scroll and values

    public mutating func scroll(to offset: Double) throws(CommandError) -> [Event] {
        try Limits.validateOffset(offset)
        scroll = offset
        return [.scrolled(tab: id, offset: offset)]
    }

    /// Sets (or, with `.null`, removes) a retained value. Emitted even when nothing changes.
    public mutating func set(key: String, value: JSONValue) throws(CommandError) -> [Event] {
        try Limits.validateKey(key)
        try Limits.validateValue(value)
        if value.isNull {
            values[key] = nil
        } else {
            if values[key] == nil, values.count >= Limits.maxKeysPerTab {
                throw .invalid("tab '\(id)' already holds \(Limits.maxKeysPerTab) keys")
            }
            values[key] = value
        }
        return [.valueSet(tab: id, key: key, value: value)]
    }

    /// Applies the fields an `updateTab` gives; `tabUpdated` only when something changed.
    public mutating func update(_ update: TabUpdate) throws(CommandError) -> [Event] {
        var next = info
        if let title = update.title { try Limits.validateTitle(title); next.title = title }
        if let icon = update.icon { try Limits.validateIcon(icon); next.icon = icon }
        if let color = update.color { next.color = try Limits.normalizeColor(color) }
        if let badge = update.badge { try Limits.validateBadge(badge); next.badge = badge }
        guard next != info else { return [] }
        info = next
        return [.tabUpdated(self)]
    }
}
