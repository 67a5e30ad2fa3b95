/// What a command did.
public enum CommandOutcome: Sendable, Equatable {
    /// The command took effect. `batch` holds its events (nil when it changed nothing);
    /// `seq` is its last event's seq, or the current seq when it changed nothing.
    case applied(seq: Int, batch: EventBatch?)
    /// The answer to `sync`.
    case snapshot(Snapshot)
    /// The answer to `ping`.
    case pong
    /// The answer to `clients`.
    case clients(ClientPage)
}

/// A command that has been applied, or refused: ``Coordinator/outcome(of:)`` tells
/// what came of it once its batch is published.
public struct Receipt: Sendable {
    /// What the command came to, as decided.
    let decided: Coordinator.Decided
    /// For a command that changed nothing: the wait and last seq of the batch applied just
    /// before it, if that was not published yet (it is answered once that is).
    let after: (wait: CommitWait, seq: Int)?
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
        let decided = await perform(command, by: client, ref: ref)
        return Receipt(decided: decided, after: decided.changedNothing ? lastUnpublished : nil)
    }

    /// Applies one command and returns at once; its answer goes to the publishers (see
    /// ``addPublisher(_:)``) addressed to `address`, after the answers of every command
    /// submitted before it to the same address, and an `ack` together with the batch it
    /// reports. The daemon's short road: nobody waits for the commit.
    ///
    /// `commandKey`: a keyed command (``Durability``), which another writer of the log may
    /// decide too: if the log holds its outcome already, it is not applied again, and its
    /// answer is the one recorded.
    public func enqueue(_ command: Command, by client: ClientID, ref: String?, replyTo address: UInt64, commandKey: String? = nil) async {
        await enter(); defer { leave() }
        // A `sync` behind answers that wait for another writer (commands decided elsewhere): its
        // snapshot is taken when its turn comes, to hold what those answers report.
        if case .sync = command, answers.hasAnswers(address) {
            _ = await settle()
            if answers.hasAnswers(address) {
                answers.add(.syncLater, client: client, ref: ref, to: address)
                return
            }
        }
        // The ack is queued before the batch is recorded: in memory, recording publishes
        // the batch at once, and the ack goes with it.
        let step = await perform(command, by: client, ref: ref, commandKey: commandKey) { lastSeq in
            answers.add(.applied(seq: lastSeq), client: client, ref: ref, to: address, command: command, commandKey: commandKey)
        }
        guard let pending = pendingAnswer(step, ref: ref) else { return } // its ack goes with the batch
        if let commandKey, let record = outcomeToRecord(step) {
            let order = answers.add(.recordingOutcome, client: client, ref: ref, to: address, command: command, commandKey: commandKey)
            storeOutcome(record, commandKey: commandKey, address: address, order: order, ref: ref)
            return
        }
        answers.add(pending, client: client, ref: ref, to: address, command: command, commandKey: commandKey)
        publishAnswers(to: address)
    }

    /// A command of `client` handed to another writer of the log with `commandKey`: its
    /// answer (``settleElsewhere(_:order:frame:)``) goes to `address` in its turn among the
    /// address's answers, an `ack` once its seq is published here. Returns the name of
    /// the wait.
    public func expectElsewhere(_ command: Command, by client: ClientID, ref: String?, replyTo address: UInt64, commandKey: String) -> Int {
        answers.add(.elsewhere, client: client, ref: ref, to: address, command: command, commandKey: commandKey)
    }

    /// The other writer's answer to a command of ``expectElsewhere(_:by:ref:replyTo:commandKey:)``.
    public func settleElsewhere(_ address: UInt64, order: Int, frame: ServerFrame) {
        answers.settleElsewhere(address, order: order, frame: frame)
        publishAnswers(to: address)
    }

    /// The other writer did not answer: the command is decided here instead, in its turn
    /// (unless the log holds its outcome already: then that is its answer).
    public func decideInstead(_ address: UInt64, order: Int) async {
        await enter(); defer { leave() }
        guard let redo = answers.elsewhere(address, order: order) else { return }
        settle(redo, await perform(redo.command, by: redo.client, ref: redo.ref, commandKey: redo.commandKey) { lastSeq in
            answers.settle(redo, .applied(seq: lastSeq))
        })
        publishAnswers(to: address)
    }

    /// Answers the `sync`s whose turn has come (``AnswerQueues/Pending/syncLater``) with
    /// a snapshot taken now.
    func answerDueSyncs() async {
        await enter(); defer { leave() }
        // Syncs due from here on need another task: this one may already be past them.
        dueSyncsScheduled = false
        guard answers.hasDueSyncs else { return }
        _ = await settle()
        let snapshot = await buildSnapshot()
        for due in answers.takeDueSyncs() { answers.settle(due.address, order: due.order, .ready(.snapshot(ref: due.ref, snapshot))) }
        publish([])
    }

    /// Whether batches of this coordinator's own wait for their commit.
    public var hasUnpublished: Bool { lastUnpublished != nil }

    /// Waits until every batch applied so far is committed and published (or rolled back,
    /// and the commands of a conflict decided again and committed).
    public func settled() async {
        await enter(); defer { leave() }
        _ = await settle()
    }

    /// The answer a step leaves to wait for; nil when recording queued it already.
    private func pendingAnswer(_ step: Decided, ref: String?) -> AnswerQueues.Pending? {
        switch step {
        case .answered(.pong): .ready(.pong(ref: ref))
        case let .answered(.clients(page)): .ready(.clients(ref: ref, node: presenceRules.node, page))
        case let .answered(.snapshot(snapshot)): .ready(.snapshot(ref: ref, snapshot))
        case let .answered(.applied(seq, _)): .ready(.ack(ref: ref, seq: seq))
        case let .refused(error): .ready(.error(ref: ref, error))
        case .unchanged: .unchanged(after: seq)
        case .decidedBefore(.applied(let stored)): .applied(seq: stored)
        case .decidedBefore(.unchanged(let at)): .unchanged(after: at)
        case .decidedBefore(.refused(let error)): .ready(.error(ref: ref, error))
        case .recorded: nil
        }
    }

    /// After a conflict rolled the state back: decides the held commands again, in the
    /// order they were first decided, on the state as it is now (with the other writer's
    /// batches). Each gets a new answer: an ack of its new batch, or what it comes to now
    /// (it may be `unknown_tab` or `invalid` now, or change nothing).
    func redecide(_ held: [AnswerQueues.Redo]) async {
        for redo in held {
            settle(redo, await perform(redo.command, by: redo.client, ref: redo.ref, commandKey: redo.commandKey) { lastSeq in
                answers.settle(redo, .applied(seq: lastSeq))
            })
        }
    }

    /// Gives a command decided again (or instead of another writer) the answer its step
    /// leaves to wait for; a forwarded one that changed nothing waits for its outcome record.
    private func settle(_ redo: AnswerQueues.Redo, _ step: Decided) {
        guard let pending = pendingAnswer(step, ref: redo.ref) else { return }
        if let commandKey = redo.commandKey, let record = outcomeToRecord(step) {
            answers.settle(redo, .recordingOutcome)
            storeOutcome(record, commandKey: commandKey, address: redo.address, order: redo.order, ref: redo.ref)
        } else {
            answers.settle(redo, pending)
        }
    }

    /// What the outcome record of a keyed command's step records, when it must have one: the
    /// step decided it (not the log's record of it) and it changed nothing. Another writer
    /// may decide the same command (the one that handed it over, when this one seemed dead;
    /// this one, when the other gave up on it): the outcome record, ordered in the log like a
    /// batch, makes the first decision the only one, so that a
    /// command's answer and its effect can never come from two decisions.
    private func outcomeToRecord(_ step: Decided) -> KeyedOutcome? {
        guard recordsOutcomes else { return nil }
        switch step {
        case .unchanged: return .unchanged(seq: seq)
        case let .refused(error): return .refused(error)
        case .answered, .recorded, .decidedBefore: return nil
        }
    }

    /// What a command came to when it was decided (``perform(_:by:ref:commandKey:recording:)``),
    /// on either road: the answer queues take it as the answer to wait for
    /// (``pendingAnswer(_:ref:)``), a ``Receipt`` keeps it for ``outcome(of:)``.
    enum Decided: Sendable {
        /// `sync`, `ping` and `clients`: answered at once.
        case answered(CommandOutcome)
        case refused(CommandError)
        /// Applied, and changed nothing.
        case unchanged
        /// Applied and recorded; with a store, `wait` tells when it is committed.
        case recorded(EventBatch, wait: CommitWait?)
        /// A keyed command the store holds a decision of already.
        case decidedBefore(KeyedOutcome)

        var changedNothing: Bool {
            if case .unchanged = self { return true }
            return false
        }
    }

    /// What both roads share, inside the gate: `sync` and `ping` answered, any other
    /// command decided, applied and recorded. `recording` runs with the batch's last seq
    /// just before the batch is applied and recorded.
    private func perform(_ command: Command, by client: ClientID, ref: String?, commandKey: String? = nil,
                         recording: (Int) -> Void = { _ in }) async -> Decided {
        switch command {
        case .sync:
            if let error = await settle() { return .refused(error) }
            return .answered(.snapshot(await buildSnapshot()))
        case .ping:
            return .answered(.pong)
        case let .clients(after, limit):
            let limit = limit ?? Limits.defaultClientsPage
            guard (1...Limits.maxClientsPage).contains(limit) else {
                return .refused(.invalid("'limit' must be 1 to \(Limits.maxClientsPage)"))
            }
            if let after, !Members.isCursor(after) { return .refused(.invalid("'after' is not a cursor of this room")) }
            return .answered(.clients(members.page(after: after, limit: limit)))
        default:
            break
        }
        if let commandKey, let stored = storedOutcome(commandKey) { return .decidedBefore(stored) }
        let events: [Event]
        do { events = try await decide(command) } catch { return .refused(error) }
        guard !events.isEmpty else { return .unchanged }
        recording(seq + events.count)
        await apply(events)
        let (batch, wait) = record(events, by: client, ref: ref, commandKey: commandKey)!
        return .recorded(batch, wait: wait)
    }

    /// Answers `address` with `frame` (a frame refused before it reached a command),
    /// after every answer queued for it before.
    public func answer(_ frame: ServerFrame, client: ClientID, to address: UInt64) {
        answers.add(.ready(frame), client: client, ref: nil, to: address)
        publishAnswers(to: address)
    }

    /// What a submitted command came to: its events are published (committed, with a
    /// store) when this returns. A failed commit answers `unavailable`.
    public func outcome(of receipt: Receipt) async throws(CommandError) -> CommandOutcome {
        switch receipt.decided {
        case let .answered(outcome):
            return outcome
        case let .refused(error), .decidedBefore(.refused(let error)):
            throw error
        case .decidedBefore: // no key on this road
            return .applied(seq: currentSeq, batch: nil)
        case let .recorded(batch, nil):
            return .applied(seq: batch.lastSeq, batch: batch)
        case let .recorded(batch, wait?):
            if let error = await wait.wait() {
                await rollBack(error, failed: wait)
                throw error
            }
            publishCommitted(through: batch.lastSeq)
            return .applied(seq: batch.lastSeq, batch: batch)
        case .unchanged:
            if let after = receipt.after {
                // Only what is known to be committed: later batches may still be on their way.
                // Decided on state that a failed commit took away: it cannot say it took effect.
                if let error = await after.wait.wait() {
                    await rollBack(error, failed: after.wait)
                    throw error
                }
                publishCommitted(through: after.seq)
            }
            return .applied(seq: currentSeq, batch: nil)
        }
    }

    /// The events a command causes (``CommandRules``, on values): the states of the tabs
    /// it touches are read once each, the counter only when the rules need it.
    private func decide(_ command: Command) async throws(CommandError) -> [Event] {
        var states: [TabID: TabState] = [:]
        for id in CommandRules.touchedTabs(command, bar: bar) where states[id] == nil {
            if let tab = tabs[id] { states[id] = await tab.state }
        }
        let counter = CommandRules.needsCounter(command, bar: bar, tabs: states) ? await self.counter.working : nil
        let room = CommandRules.Room(bar: bar, newPageID: ids.newPageID, counter: counter, weight: stateWeight, maxWeight: maxStateBytes)
        return try CommandRules.decide(command, room: room, tabs: states)
    }
}
