extension Snapshot {
    /// Applies one batch (its seqs must follow on from ``seq``).
    public mutating func apply(_ batch: EventBatch) throws(ReplayError) {
        for e in batch.events { try apply(e) }
    }

    /// Applies one event: the state after it, exactly as the coordinator has it. Each
    /// part of the state changes by its own `apply` — ``TabState/apply(_:selected:)``,
    /// ``TabBar/apply(_:)``, ``SharedCount``, ``Roster/apply(_:)`` — the same functions
    /// the live coordinator uses. Throws, changing nothing, when the event does not fit.
    public mutating func apply(_ e: SequencedEvent) throws(ReplayError) {
        guard e.seq == seq + 1 else { throw ReplayError(seq: e.seq, message: "expected seq \(seq + 1)") }
        do { try fold(e.event) } catch { throw ReplayError(seq: e.seq, message: error.message) }
        seq = e.seq
    }

    /// Each branch checks everything before it changes anything.
    private mutating func fold(_ event: Event) throws(FoldError) {
        switch event {
        case .selected, .tabAdded, .tabMoved, .tabRemoved:
            var bar = TabBar(unchecked: tabs.map(\.id), selected: selected)
            try bar.apply(event)
            switch event {
            case let .tabAdded(tab, index): tabs.insert(tab, at: index)
            case let .tabRemoved(id): tabs.removeAll { $0.id == id }
            case .tabMoved:
                let byID = Dictionary(uniqueKeysWithValues: tabs.map { ($0.id, $0) })
                tabs = bar.order.map { byID[$0]! }
            default: break
            }
            selected = bar.selected
        case .clientJoined, .clientLeft:
            var roster = Roster(clients: clients, count: clientCount)
            try roster.apply(event)
            (clients, clientCount) = (roster.clients, roster.count)
        default:
            guard let id = event.tabScope, let i = tabs.firstIndex(where: { $0.id == id }) else {
                throw FoldError("\(event.kind) for unknown tab '\(event.tabScope ?? "-")'")
            }
            try SharedCount.apply(event, to: &scrollToTop)
            try tabs[i].apply(event, selected: id == selected)
        }
    }
}
