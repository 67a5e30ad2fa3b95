/// What a command did.
public enum CommandOutcome: Sendable, Equatable {
    /// The command took effect. `batch` holds its events (nil when it changed nothing);
    /// `seq` is its last event's seq, or the current seq when it changed nothing.
    case applied(seq: Int, batch: EventBatch?)
    /// The answer to `sync`.
    case snapshot(Snapshot)
    /// The answer to `ping`.
    case pong
}

/// A command that has been applied, or refused: ``Coordinator/outcome(of:)`` tells
/// what came of it once its batch is published.
public struct Receipt: Sendable {
    enum State: Sendable {
        case done(CommandOutcome)
        case failed(CommandError)
        /// Waiting for the commit of its own batch.
        case pending(EventBatch, CommitWait)
        /// Changed nothing; answered once everything applied before it is published
        /// (the wait and last seq of the batch applied just before it, if unpublished).
        case unchanged(after: (wait: CommitWait, seq: Int)?)
    }
    let state: State
}

extension Coordinator {
    /// Applies one command as client `client`, with the `ref` it gave, and publishes its
    /// events as one batch before returning. Refused commands change nothing.
    ///
    /// Commands run one at a time in the order they reach the coordinator, so a client
    /// that awaits each command before sending the next sees them applied in its order.
    public func execute(_ command: Command, by client: ClientID = Coordinator.daemonID, ref: String? = nil) async throws(CommandError) -> CommandOutcome {
        try await outcome(of: submit(command, by: client, ref: ref))
    }

    /// Applies one command and returns at once, without waiting for its commit: the
    /// next command can be applied while this one's batch is being stored. Call
    /// ``outcome(of:)`` for the answer; receipts complete in the order they were issued.
    public func submit(_ command: Command, by client: ClientID = Coordinator.daemonID, ref: String? = nil) async -> Receipt {
        await enter(); defer { leave() }
        switch command {
        case .sync:
            if let error = await settle() { return Receipt(state: .failed(error)) }
            return Receipt(state: .done(.snapshot(await buildSnapshot())))
        case .ping:
            return Receipt(state: .done(.pong))
        default: break
        }
        let events: [Event]
        do { events = try await self.events(for: command) } catch { return Receipt(state: .failed(error)) }
        switch record(events, by: client, ref: ref) {
        case nil: return Receipt(state: .unchanged(after: lastUnpublished))
        case let (batch, nil)?: return Receipt(state: .done(.applied(seq: batch.lastSeq, batch: batch)))
        case let (batch, wait?)?: return Receipt(state: .pending(batch, wait))
        }
    }

    /// What a submitted command came to: its events are published (committed, with a
    /// store) when this returns. A failed commit answers `unavailable`.
    public func outcome(of receipt: Receipt) async throws(CommandError) -> CommandOutcome {
        switch receipt.state {
        case let .done(outcome):
            return outcome
        case let .failed(error):
            throw error
        case let .pending(batch, wait):
            if let error = await wait.value {
                await rollback()
                throw error
            }
            publishCommitted(through: batch.lastSeq)
            return .applied(seq: batch.lastSeq, batch: batch)
        case let .unchanged(after):
            if let after {
                // Only what is known to be committed: later batches may still be on their way.
                if await after.wait.value == nil { publishCommitted(through: after.seq) } else { await rollback() }
            }
            return .applied(seq: currentSeq, batch: nil)
        }
    }

    /// The rules of SEMANTICS.md's command table: each case validates everything first
    /// (unknown_tab, then invalid) and only then changes state.
    private func events(for command: Command) async throws(CommandError) -> [Event] {
        switch command {
        case let .select(id):
            let to = try tab(id)
            return await select(id, to)

        case let .tap(id):
            let tab = try tab(id)
            guard id == bar.selected else { return await select(id, tab) }
            // The selected tab (seed 003): the first tap goes back to the root page,
            // the next one scrolls to the top through the shared counter.
            let popped = await tab.popToRoot(visible: true)
            if !popped.isEmpty { return popped }
            let count = await counter.increment()
            await tab.resetScroll()
            return [.scrollToTop(tab: id, count: count)]

        case let .push(id, route):
            let (tabID, tab) = try target(id)
            let events = try await tab.push(route: route, page: "p\(nextPage)", visible: tabID == bar.selected)
            nextPage += 1
            return events

        case let .pop(id):
            let (tabID, tab) = try target(id)
            return await tab.pop(visible: tabID == bar.selected)

        case let .popToRoot(id):
            let (tabID, tab) = try target(id)
            return await tab.popToRoot(visible: tabID == bar.selected)

        case let .scroll(id, offset):
            return try await target(id).1.scroll(to: offset)

        case let .set(id, key, value):
            return try await target(id).1.set(key: key, value: value)

        case let .addTab(info, index):
            let info = try Limits.validate(info)
            let at = try bar.insertionIndex(for: info.id, at: index)
            let state = TabState(info: info, rootPage: "p\(nextPage)")
            nextPage += 1
            bar.insert(info.id, at: at)
            tabs[info.id] = TabActor(state: state)
            return [.tabAdded(state, index: at)]

        case let .updateTab(update):
            return try await tab(update.id).update(update)

        case let .moveTab(id, index):
            return try bar.move(id, to: index) ? [.tabMoved(tab: id, index: index)] : []

        case let .removeTab(id):
            try bar.checkRemovable(id)
            let removed = tabs[id]!
            guard id == bar.selected else {
                _ = bar.remove(id)
                tabs[id] = nil
                return [.tabRemoved(tab: id)]
            }
            let disappear = await removed.disappear()
            let next = bar.remove(id)!
            tabs[id] = nil
            return [disappear, .tabRemoved(tab: id), .selected(from: id, to: next)] + (await tabs[next]!.appear())

        case .sync, .ping:
            return []
        }
    }

    /// `selected`, `disappear P`, `[firstAppear Q]`, `appear Q`; nothing if already selected.
    private func select(_ id: TabID, _ to: TabActor) async -> [Event] {
        let from = bar.selected
        guard bar.select(id) else { return [] }
        return [.selected(from: from, to: id), await tabs[from]!.disappear()] + (await to.appear())
    }

    private func tab(_ id: TabID) throws(CommandError) -> TabActor {
        guard let tab = tabs[id] else { throw .unknownTab(id) }
        return tab
    }

    /// The tab a command names, or the selected one when it names none.
    private func target(_ id: TabID?) throws(CommandError) -> (TabID, TabActor) {
        let id = id ?? bar.selected
        return (id, try tab(id))
    }
}
