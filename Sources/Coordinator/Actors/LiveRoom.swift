/// The room as the coordinator applies commands to it: the bar, an actor per tab, the
/// scroll-to-top counter, the next ids, the roster, the last seq applied and what the
/// state weighs. It runs ahead of what is published while commits are pending.
///
/// Owned by the ``Coordinator`` and used only on its executor, which the tab actors and
/// the counter share (``RoomExecutor``): every visit to them is synchronous
/// (`assumeIsolated`), so deciding a command and applying its events is one step with no
/// suspension point in it, and needs no gate against the next command.
struct LiveRoom {
    private(set) var bar: TabBar
    private(set) var tabs: [TabID: TabActor]
    /// Each tab's weight as of the last event applied to it, and their sum: the room's
    /// state as the bound on it (``Coordinator/Configuration/maxStateBytes``) counts it.
    private var tabWeights: [TabID: Int]
    private(set) var weight: Int { didSet { gauge?.set(weight) } }
    let maxWeight: Int
    private let gauge: StateBytesGauge?
    /// The last seq applied (the coordinator moves it as it stamps or takes in batches).
    var seq: Int
    /// The next page and client numbers.
    private(set) var ids: IDCounters
    /// Who is connected, as the stream says (in a counted room: the count it last reported).
    private(set) var roster: Roster
    let counter: ScrollCounter
    /// The actor whose executor the tab actors share.
    private let home: any Actor

    init(_ stored: StoredState, counter: ScrollCounter, home: any Actor, maxWeight: Int, gauge: StateBytesGauge?) {
        (bar, tabs, tabWeights, weight, seq, ids, roster) = Self.parts(of: stored, home: home)
        self.counter = counter
        self.home = home
        self.maxWeight = maxWeight
        self.gauge = gauge
        gauge?.set(weight)
    }

    /// Puts the room back to `stored` (a rollback): new tab actors, the counter reset.
    mutating func restore(_ stored: StoredState) {
        (bar, tabs, tabWeights, weight, seq, ids, roster) = Self.parts(of: stored, home: home)
        counter.assumeIsolated { $0.reset(to: stored.snapshot.scrollToTop) }
    }

    /// The bar, an actor per tab, and each tab weighed in full (once: its actor keeps it).
    private static func parts(of stored: StoredState, home: any Actor)
        -> (TabBar, [TabID: TabActor], [TabID: Int], Int, Int, IDCounters, Roster) {
        let snapshot = stored.snapshot
        let weights = Dictionary(uniqueKeysWithValues: snapshot.tabs.map { ($0.id, StateWeight.tab($0)) })
        let actors = Dictionary(uniqueKeysWithValues: snapshot.tabs.map { ($0.id, TabActor(state: $0, weight: weights[$0.id], home: home)) })
        return (TabBar(order: snapshot.tabs.map(\.id), selected: snapshot.selected), actors, weights, weights.values.reduce(0, +),
                snapshot.seq, IDCounters(covering: snapshot, nextPage: stored.nextPage, nextClient: stored.nextClient), snapshot.roster)
    }

    /// The state of tab `id`, read inside its actor.
    func state(of id: TabID) -> TabState? { tabs[id]?.assumeIsolated { $0.state } }

    /// The events a command causes (``CommandRules``, on values): the states of the tabs it
    /// touches are read inside their actors, once each, the counter only when the rules
    /// need it.
    func decide(_ command: Command) throws(CommandError) -> [Event] {
        var states: [TabID: TabState] = [:]
        for id in CommandRules.touchedTabs(command, bar: bar) where states[id] == nil {
            if let state = state(of: id) { states[id] = state }
        }
        let counter = CommandRules.needsCounter(command, bar: bar, tabs: states) ? self.counter.assumeIsolated { $0.working } : nil
        let room = CommandRules.Room(bar: bar, newPageID: ids.newPageID, counter: counter, weight: weight, maxWeight: maxWeight)
        return try CommandRules.decide(command, room: room, tabs: states)
    }

    /// The one road by which decided events change the live state: each event goes to the
    /// owner of what it changes, and each owner changes by its own `apply`, the same
    /// functions that fold a stream on replay (``Snapshot/apply(_:)-(SequencedEvent)``).
    /// Consecutive events of one tab reach its actor in one visit. Events that do not fold
    /// are a fault in a rule: the process stops rather than let the live state and the
    /// stream disagree.
    mutating func apply(_ events: [Event]) {
        func fold(_ body: () throws(FoldError) -> Void) {
            do { try body() } catch { preconditionFailure("a decided event does not fold: \(error)") }
        }
        var i = 0
        while i < events.count {
            let event = events[i]
            ids.apply(event)
            switch event.part {
            case .bar:
                fold { () throws(FoldError) in _ = try bar.apply(event) }
                // The bar's order changed: a tab's actor comes or goes with it.
                if case let .tabAdded(state, _) = event {
                    let tabWeight = StateWeight.tab(state)
                    tabs[state.id] = TabActor(state: state, weight: tabWeight, home: home)
                    tabWeights[state.id] = tabWeight
                    weight += tabWeight
                } else if case let .tabRemoved(id) = event {
                    tabs[id] = nil
                    weight -= tabWeights.removeValue(forKey: id) ?? 0
                }
            case .presence:
                fold { () throws(FoldError) in try roster.apply(event) }
            case let .tab(id):
                if case .scrollToTop = event { counter.assumeIsolated { $0.apply(event) } }
                // The tab's events that follow go to its actor in one visit (up to the next
                // scroll-to-top, which the counter sees first).
                var end = i + 1
                while end < events.count, events[end].tabScope == id {
                    if case .scrollToTop = events[end] { break }
                    ids.apply(events[end])
                    end += 1
                }
                let selected = id == bar.selected
                let tabWeight = tabs[id]!.assumeIsolated { $0.apply(events[i..<end], selected: selected) }
                weight += tabWeight - (tabWeights.updateValue(tabWeight, forKey: id) ?? 0)
                i = end
                continue
            }
            i += 1
        }
    }

    /// The room as it is now (at ``seq``, pending commits included).
    func snapshot() -> Snapshot {
        let states = bar.order.map { state(of: $0)! }
        return Snapshot(seq: seq, selected: bar.selected, scrollToTop: counter.assumeIsolated { $0.working }, tabs: states,
                        clients: roster.clients, clientCount: roster.count, presence: roster.mode, nodes: roster.nodes)
    }
}
