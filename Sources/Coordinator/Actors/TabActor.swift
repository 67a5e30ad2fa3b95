/// Owns one tab's state. A thin shell: every rule is a ``TabState`` method, the actor
/// only serializes access. The ``Coordinator`` is its only writer and calls it while
/// it holds its command gate, so the rules see one command at a time.
public actor TabActor {
    public nonisolated let id: TabID
    public private(set) var state: TabState

    public init(state: TabState) {
        self.id = state.id
        self.state = state
    }

    func appear() -> [Event] { state.appear() }
    func disappear() -> Event { state.disappear() }
    func push(route: String, page: PageID, visible: Bool) throws(CommandError) -> [Event] {
        try state.push(route: route, page: page, visible: visible)
    }
    func pop(visible: Bool) -> [Event] { state.pop(visible: visible) }
    func popToRoot(visible: Bool) -> [Event] { state.popToRoot(visible: visible) }
    func scroll(to offset: Double) throws(CommandError) -> [Event] { try state.scroll(to: offset) }
    /// Seed 003's scroll-to-top: the offset becomes 0, with no `scrolled` event.
    func resetScroll() { state.scroll = 0 }
    func set(key: String, value: JSONValue) throws(CommandError) -> [Event] { try state.set(key: key, value: value) }
    func update(_ update: TabUpdate) throws(CommandError) -> [Event] { try state.update(update) }
}
