extension Snapshot {
    /// Applies one batch (its seqs must follow on from ``seq``). Within a batch the
    /// selection may name a removed tab (until the `selected` that follows); at its end it
    /// must name a tab the snapshot has.
    public mutating func apply(_ batch: EventBatch) throws(ReplayError) {
        for e in batch.events { try apply(e) }
        guard tabs.contains(where: { $0.id == selected }) else {
            throw ReplayError(seq: seq, message: "after the batch, the selected tab '\(selected)' does not exist")
        }
    }

    /// Applies one event: the state after it, exactly as the coordinator has it. Each
    /// part of the state changes by its own `apply` — ``TabState/apply(_:selected:)``,
    /// ``TabBar/apply(_:)``, ``ScrollToTopRule/apply(_:to:)``, ``Roster/apply(_:)`` — the same functions
    /// the live coordinator uses. Throws, changing nothing, when the event does not fit.
    public mutating func apply(_ e: SequencedEvent) throws(ReplayError) {
        guard e.seq == seq + 1 else { throw ReplayError(seq: e.seq, message: "expected seq \(seq + 1)") }
        do { try fold(e.event) } catch { throw ReplayError(seq: e.seq, message: error.message) }
        seq = e.seq
    }

    /// Each branch checks everything before it changes anything.
    private mutating func fold(_ event: Event) throws(FoldError) {
        switch event.part {
        case .bar:
            var bar = TabBar(unchecked: tabs.map(\.id), selected: selected)
            // The bar decides; the tabs, kept in its order, follow its edit.
            let change = try bar.apply(event)
            change.apply(to: &tabs) {
                guard case let .tabAdded(tab, _) = event else { preconditionFailure("only tabAdded inserts") }
                return tab
            }
            selected = bar.selected
        case .presence:
            // The list moves into the roster and back, so it is not copied per event.
            var roster = self.roster
            clients = []
            defer { self.roster = roster }
            try roster.apply(event)
        case let .tab(id):
            guard let i = tabs.firstIndex(where: { $0.id == id }) else {
                throw FoldError("\(event.kind) for unknown tab '\(id)'")
            }
            try ScrollToTopRule.apply(event, to: &scrollToTop)
            try tabs[i].apply(event, selected: id == selected)
        }
    }
}
