/// The rules of SEMANTICS.md's command table as values: the events a command causes,
/// decided from the room's state, which they do not change. No actor and no suspension:
/// whoever holds the state decides with them. The coordinator reads the states of the tabs
/// a command touches (``touchedTabs(_:bar:)``, each read once) and the scroll-to-top
/// counter when the rules need it (``needsCounter(_:bar:tabs:)``), then decides here; the
/// reference model (Conformance) decides with the same function.
///
/// Each command checks everything first (`unknown_tab`, then `invalid`), then returns its
/// events; applying them is the caller's (``Snapshot/apply(_:)`` for a value,
/// ``Coordinator`` for the live room).
public enum CommandRules {
    /// What a decision reads besides the tabs' states.
    public struct Room: Sendable {
        public var bar: TabBar
        /// The id the next new page gets (a push's page, an added tab's root).
        public var newPageID: PageID
        /// The scroll-to-top counter's value now: read only when ``needsCounter(_:bar:tabs:)``
        /// says so (nil otherwise).
        public var counter: Int?
        /// The room's state in bytes now, and its limit: a command that would grow it past
        /// the limit is `invalid`.
        public var weight: Int
        public var maxWeight: Int

        public init(bar: TabBar, newPageID: PageID, counter: Int?, weight: Int, maxWeight: Int) {
            self.bar = bar; self.newPageID = newPageID; self.counter = counter; self.weight = weight; self.maxWeight = maxWeight
        }
    }

    /// The tabs whose states `command` reads, in the order it reads them (an unknown one is
    /// left for ``decide(_:room:tabs:)`` to refuse).
    public static func touchedTabs(_ command: Command, bar: TabBar) -> [TabID] {
        switch command {
        case let .select(id), let .tap(id):
            return id == bar.selected ? [id] : [bar.selected, id]
        case let .push(id, _), let .pop(id), let .popToRoot(id), let .scroll(id, _), let .set(id, _, _):
            return [id ?? bar.selected]
        case let .updateTab(update):
            return [update.id]
        case let .removeTab(id):
            guard let next = bar.successor(ofRemoved: id) else { return [id] }
            return [id, next]
        case .addTab, .moveTab, .sync, .ping, .clients:
            return []
        }
    }

    /// Whether deciding `command` reads the scroll-to-top counter: a tap on the selected
    /// tab at its root page (the second tap of seed 003).
    public static func needsCounter(_ command: Command, bar: TabBar, tabs: [TabID: TabState]) -> Bool {
        guard case let .tap(id) = command, id == bar.selected, let tab = tabs[id] else { return false }
        return tab.popToRootEvents(visible: true).isEmpty
    }

    /// The events `command` causes in `room`, whose touched tabs are `tabs`.
    public static func decide(_ command: Command, room: Room, tabs: [TabID: TabState]) throws(CommandError) -> [Event] {
        let bar = room.bar
        func tab(_ id: TabID) throws(CommandError) -> TabState {
            guard let tab = tabs[id] else { throw .unknownTab(id) }
            return tab
        }
        /// `invalid` when the room's state would pass its bound by `growth` bytes. Commands
        /// that take nothing more (or give some back) always pass, so a room over its bound
        /// (a lower bound than it was stored with) can still shrink.
        func checkWeight(growing growth: Int) throws(CommandError) {
            guard growth > 0, room.weight + growth > room.maxWeight else { return }
            throw .invalid("the room's state would be \(room.weight + growth) bytes, more than its limit of \(room.maxWeight)")
        }
        /// `selected`, `disappear P`, `[firstAppear Q]`, `appear Q`; nothing if already selected.
        func select(_ to: TabState) throws(CommandError) -> [Event] {
            guard to.id != bar.selected else { return [] }
            return [.selected(from: bar.selected, to: to.id), try tab(bar.selected).disappearEvent()] + to.appearEvents()
        }
        switch command {
        case let .select(id):
            return try select(try tab(id))

        case let .tap(id):
            let target = try tab(id)
            guard id == bar.selected else { return try select(target) }
            // The selected tab (seed 003): the first tap goes back to the root page, the
            // next one scrolls to the top through the scroll-to-top counter.
            let popped = target.popToRootEvents(visible: true)
            if !popped.isEmpty { return popped }
            guard let counter = room.counter else { preconditionFailure("a tap at the root decided without the counter") }
            return [.scrollToTop(tab: id, count: counter + 1)]

        case let .push(id, route):
            let id = id ?? bar.selected
            let state = try tab(id)
            let events = try state.pushEvents(route: route, page: room.newPageID, visible: id == bar.selected)
            try checkWeight(growing: StateWeight.change(of: events[0], to: state))
            return events

        case let .pop(id):
            let id = id ?? bar.selected
            return try tab(id).popEvents(visible: id == bar.selected)

        case let .popToRoot(id):
            let id = id ?? bar.selected
            return try tab(id).popToRootEvents(visible: id == bar.selected)

        case let .scroll(id, offset):
            return try tab(id ?? bar.selected).scrollEvents(to: offset)

        case let .set(id, key, value):
            let state = try tab(id ?? bar.selected)
            let events = try state.setEvents(key: key, value: value)
            try checkWeight(growing: StateWeight.change(of: events[0], to: state))
            return events

        case let .addTab(info, index):
            let info = try Limits.validate(info)
            let at = try bar.insertionIndex(for: info.id, at: index)
            let added = TabState(info: info, rootPage: room.newPageID)
            try checkWeight(growing: StateWeight.tab(added))
            return [.tabAdded(added, index: at)]

        case let .updateTab(update):
            let state = try tab(update.id)
            let events = try state.updateEvents(update)
            if let event = events.first { try checkWeight(growing: StateWeight.change(of: event, to: state)) }
            return events

        case let .moveTab(id, index):
            return try bar.moveEvents(id, to: index)

        case let .removeTab(id):
            try bar.checkRemovable(id)
            guard let next = bar.successor(ofRemoved: id) else { return [.tabRemoved(tab: id)] }
            return [try tab(id).disappearEvent(), .tabRemoved(tab: id), .selected(from: id, to: next)] + (try tab(next).appearEvents())

        case .sync, .ping, .clients:
            return []
        }
    }
}
