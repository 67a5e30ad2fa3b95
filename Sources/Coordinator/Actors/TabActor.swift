/// Owns one tab's state. A thin shell: the rules are ``TabState``'s decisions, and the
/// state changes only through ``TabState/apply(_:selected:)``. The ``Coordinator`` is
/// its only writer.
///
/// It runs on its coordinator's serial executor (``RoomExecutor``): the coordinator
/// visits it synchronously, inside its isolation (`assumeIsolated`), so a command reads
/// and changes its tabs without a suspension point, and the tab sees one command at a time.
public actor TabActor {
    public nonisolated let id: TabID
    private nonisolated let home: any Actor
    public nonisolated var unownedExecutor: UnownedSerialExecutor { home.unownedExecutor }
    public private(set) var state: TabState
    /// What the tab weighs (``StateWeight``), kept as events apply.
    public private(set) var weight: Int

    /// `weight`: the state's ``StateWeight/tab(_:)``, when the caller has it already;
    /// `home`: the actor whose executor it shares (its coordinator's).
    init(state: TabState, weight: Int? = nil, home: any Actor) {
        self.id = state.id
        self.home = home
        self.state = state
        self.weight = weight ?? StateWeight.tab(state)
    }

    /// Applies events the coordinator decided from this tab's state (consecutive events
    /// of this tab in one batch). They were decided from this very state, so they fit:
    /// one that does not is a fault in a rule, and stops the process rather than let
    /// the live state and the stream disagree.
    /// Returns the tab's weight after them.
    @discardableResult
    func apply(_ events: ArraySlice<Event>, selected: Bool) -> Int {
        for event in events {
            let change = StateWeight.change(of: event, to: state)
            do { try state.apply(event, selected: selected) } catch {
                preconditionFailure("tab '\(id)': a decided event does not fold: \(error)")
            }
            weight += change
        }
        return weight
    }
}
