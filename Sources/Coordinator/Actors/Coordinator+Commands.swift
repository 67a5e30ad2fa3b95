extension Coordinator {
    /// The one road of every command: decides it, applies its events and records them as
    /// one batch, in one step (no suspension point); its answer goes to the publishers
    /// (see ``addPublisher(_:)``) addressed to `address`, after the answers of every command
    /// submitted before it to the same address, and an `ack` together with the batch it
    /// reports, once that is published (committed, with a store). Returns the batch, if
    /// the command caused one.
    ///
    /// `commandKey`: a keyed command (``Durability``), which another writer of the log may
    /// decide too: if the log holds its outcome already, it is not applied again, and its
    /// answer is the one recorded.
    @discardableResult
    public func enqueue(_ command: Command, by client: ClientID, ref: String?, replyTo address: UInt64, commandKey: String? = nil) -> EventBatch? {
        // A `sync` behind answers that wait for another writer (commands decided elsewhere): its
        // snapshot is taken when its turn comes, to hold what those answers report.
        if case .sync = command, answers.waitsForOthers(address) {
            answers.add(.syncLater, client: client, ref: ref, to: address, command: command)
            return nil
        }
        // The ack is queued before the batch is recorded: in memory, recording publishes
        // the batch at once, and the ack goes with it.
        let step = perform(command, by: client, ref: ref, commandKey: commandKey) { lastSeq in
            answers.add(.applied(seq: lastSeq), client: client, ref: ref, to: address, command: command, commandKey: commandKey)
        }
        guard let pending = step.pending(ref: ref, seq: live.seq, node: node) else { return step.batch }
        if let commandKey, let record = step.outcomeToRecord(seq: live.seq, recordsOutcomes: recordsOutcomes) {
            let order = answers.add(.recordingOutcome, client: client, ref: ref, to: address, command: command, commandKey: commandKey)
            storeOutcome(record, commandKey: commandKey, address: address, order: order, ref: ref)
            return nil
        }
        answers.add(pending, client: client, ref: ref, to: address, command: command, commandKey: commandKey)
        publishAnswers(to: address)
        return nil
    }

    /// Answers `address` with `frame` (a frame refused before it reached a command),
    /// after every answer queued for it before.
    public func answer(_ frame: ServerFrame, client: ClientID, to address: UInt64) {
        answers.add(.ready(frame), client: client, ref: nil, to: address)
        publishAnswers(to: address)
    }

    /// Acknowledges a frame that asked nothing of the room (a `refresh` whose token was
    /// taken) at the last seq published, after every answer queued for `address` before.
    public func acknowledge(ref: String?, client: ClientID, to address: UInt64) {
        answer(.ack(ref: ref, seq: currentSeq), client: client, to: address)
    }

    /// `sync` and `ping` answered, `clients` listed, any other command decided, applied and
    /// recorded. `recording` runs with the batch's last seq just before the batch is
    /// applied and recorded.
    private func perform(_ command: Command, by client: ClientID, ref: String?, commandKey: String? = nil,
                         recording: (Int) -> Void = { _ in }) -> CommandStep {
        switch command {
        case .sync:
            return .snapshot(live.snapshot(), seq: live.seq)
        case .ping:
            return .pong
        case let .clients(after, limit):
            let limit = limit ?? Limits.defaultClientsPage
            guard (1...Limits.maxClientsPage).contains(limit) else {
                return .refused(.invalid("'limit' must be 1 to \(Limits.maxClientsPage)"))
            }
            if let after, !Members.isCursor(after) { return .refused(.invalid("'after' is not a cursor of this room")) }
            return .clients(members.page(after: after, limit: limit))
        default:
            break
        }
        if let commandKey, let stored = storedOutcome(commandKey) { return .decidedBefore(stored) }
        let events: [Event]
        do { events = try live.decide(command) } catch { return .refused(error) }
        guard !events.isEmpty else { return .unchanged }
        recording(live.seq + events.count)
        live.apply(events)
        return .recorded(record(events, by: client, ref: ref, commandKey: commandKey)!.0)
    }

    // MARK: Callers in this process

    /// Submits one command as client `client`, with the `ref` it gave, on the one road
    /// (``enqueue(_:by:ref:replyTo:commandKey:)``), and returns at once: the next command can
    /// be applied while this one's batch is being stored. ``outcome(of:)`` waits for its answer.
    public func submit(_ command: Command, by client: ClientID = Coordinator.daemonID, ref: String? = nil) -> Receipt {
        let address = own.newAddress()
        return Receipt(address: address, batch: enqueue(command, by: client, ref: ref, replyTo: address))
    }

    /// What a submitted command came to, once its answer goes (its batch published,
    /// committed with a store). A refused command, or a failed commit, throws.
    public func outcome(of receipt: Receipt) async throws(CommandError) -> CommandOutcome {
        let frame: ServerFrame
        if let arrived = own.answer(receipt.address) {
            frame = arrived
        } else {
            frame = await withCheckedContinuation { own.wait(receipt.address, $0) }
        }
        switch frame {
        case let .ack(_, seq): return .applied(seq: seq, batch: receipt.batch?.lastSeq == seq ? receipt.batch : nil)
        case let .error(_, error): throw error
        case let .snapshot(_, snapshot): return .snapshot(snapshot)
        case .pong: return .pong
        case let .clients(_, _, page): return .clients(page)
        case .welcome, .events: preconditionFailure("a command answered with \(frame)")
        }
    }

    /// Applies one command and waits for its answer (``submit(_:by:ref:)``, ``outcome(of:)``).
    /// Commands run one at a time in the order they reach the coordinator.
    public func execute(_ command: Command, by client: ClientID = Coordinator.daemonID, ref: String? = nil) async throws(CommandError) -> CommandOutcome {
        try await outcome(of: submit(command, by: client, ref: ref))
    }

    /// Whether batches of this coordinator's own wait for their commit.
    public var hasUnpublished: Bool { lastUnpublished != nil }

    /// Waits until every batch applied so far is committed and published (or rolled back,
    /// and the commands of a conflict decided again and committed).
    public func settled() async {
        while let wait = lastUnpublished?.wait { _ = await waitForCommit(wait) }
    }

    // MARK: Commands decided by other writers

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
    public func decideInstead(_ address: UInt64, order: Int) {
        guard let redo = answers.elsewhere(address, order: order) else { return }
        decideAgain(redo)
        publishAnswers(to: address)
    }

    /// Answers the `sync`s whose turn has come (``AnswerQueues/Pending/syncLater``) with
    /// a snapshot taken now, sent once what it holds is published.
    func answerDueSyncs() {
        dueSyncsScheduled = false
        guard answers.hasDueSyncs else { return }
        let snapshot = live.snapshot()
        for due in answers.takeDueSyncs() { answers.settle(due.address, order: due.order, .snapshot(snapshot, seq: live.seq)) }
        publish([])
    }

    /// Answers the due `sync`s in a task of their own (they are found while answers are
    /// being released), unless one is on its way already.
    func scheduleDueSyncs() {
        guard answers.hasDueSyncs, !dueSyncsScheduled else { return }
        dueSyncsScheduled = true
        Task { self.answerDueSyncs() }
    }

    /// Decides a held command again (after a conflict, or instead of another writer), on
    /// the state as it is now, and gives it the answer its new step leaves to wait for; a
    /// keyed one that changed nothing waits for its outcome record.
    private func decideAgain(_ redo: AnswerQueues.Redo) {
        let step = perform(redo.command, by: redo.client, ref: redo.ref, commandKey: redo.commandKey) { lastSeq in
            answers.settle(redo, .applied(seq: lastSeq))
        }
        guard let pending = step.pending(ref: redo.ref, seq: live.seq, node: node) else { return }
        if let commandKey = redo.commandKey, let record = step.outcomeToRecord(seq: live.seq, recordsOutcomes: recordsOutcomes) {
            answers.settle(redo, .recordingOutcome)
            storeOutcome(record, commandKey: commandKey, address: redo.address, order: redo.order, ref: redo.ref)
        } else {
            answers.settle(redo, pending)
        }
    }

    /// What the log holds of the keyed command `id`, if anything.
    func storedOutcome(_ id: String) -> KeyedOutcome? { durability?.storedOutcome(id) }

    /// Whether a keyed command's decisions that change nothing are recorded: another writer may decide it too.
    var recordsOutcomes: Bool { durability?.hasOtherWriters ?? false }

    /// Records an outcome (``Durability/recordOutcome(after:record:generation:commandKey:done:)``) for a
    /// keyed command that changed nothing (`record`) on the state at the current seq:
    /// its answer, waiting as ``AnswerQueues/Pending/recordingOutcome`` at `address` and `order`,
    /// is released once the outcome record is committed, and decided again if the outcome record fails.
    func storeOutcome(_ record: KeyedOutcome, commandKey: String, address: UInt64, order: Int, ref: String?) {
        guard let durability else { return }
        let (wait, done) = commitWait()
        pipeline.recordingOutcome(after: live.seq, wait: wait, outcomeRecord: .init(address: address, order: order, record: record, ref: ref))
        durability.recordOutcome(after: live.seq, record: record, generation: pipeline.generation, commandKey: commandKey, done: done)
    }

    // MARK: Failed commits, other writers

    /// After a failed commit: publishes what did commit, then puts the state back to the
    /// store's last commit. The batches still waiting were built on state that is gone:
    /// the store fails them, and they are never published. With other writers, the
    /// commands of a conflict are decided again on the state they left
    /// (``CommitPipeline/rollback(after:stored:publishedSeq:otherWriters:)`` decides which).
    ///
    /// `failed` is the wait of the batch whose failure is reported: when it is no longer
    /// waiting, another report of the same failure has rolled back already, and batches
    /// applied since (on the restored state) must not be thrown away.
    func rollBack(_ error: CommandError, failed: CommitWait) {
        guard let durability, pipeline.isWaiting(failed) else { return }
        let stored = durability.committedState()
        let plan = pipeline.rollback(after: error, stored: stored, publishedSeq: output.seq, otherWriters: durability.hasOtherWriters)
        var held: [AnswerQueues.Redo] = []
        switch plan {
        case let .alone(committed):
            let (ready, outcomeRecords) = pipeline.takeCommitted(through: committed)
            publishTaken(ready, outcomeRecords: outcomeRecords)
        case let .shared(ownCommitted, standingOutcomes, redo, publishStoredAfter):
            // Answers past what really committed must not be released by what is published
            // below.
            for outcomeRecord in standingOutcomes { answers.settle(outcomeRecord.address, order: outcomeRecord.order, outcomeRecord.answer) }
            if redo {
                held = answers.takeRedo(after: ownCommitted)
            } else {
                answers.rollBack(to: ownCommitted, error: error)
            }
            publish(stored.history.filter { $0.lastSeq > publishStoredAfter })
        }
        let committedOwn: Int? = if case let .shared(ownCommitted, _, _, _) = plan { ownCommitted } else { nil }
        let generation = pipeline.reset(failing: error, committed: committedOwn)
        live.restore(stored)
        // A block the restored state does not hold reserved, or that a batch rolled back
        // reserved or took ids from, is no longer this coordinator's (another writer may
        // have reserved the very same numbers).
        if live.ids.nextClient < reservedIDs.upperBound || reservedBy.map({ if case .some(.some) = $0.value { true } else { false } }) == true {
            reservedIDs = 0..<0
            reservedBy = nil
        }
        output.resetCount(stored.snapshot.scrollToTop)
        durability.reset(generation: generation)
        switch plan {
        case .shared: for redo in held { decideAgain(redo) }
        case let .alone(committed): answers.rollBack(to: committed, error: error)
        }
        publish([])
    }

    /// Takes in what other writers stored: every batch of the store's committed state past
    /// this coordinator's, applied and published in order. While batches of this
    /// coordinator's own are pending, nothing is taken in: once they have all committed,
    /// the commit task takes the others' batches in; if another writer took their seqs,
    /// the rollback does (and the commands are decided again after the others' batches).
    public func absorb() {
        guard let durability, pipeline.othersStored() else { return }
        let stored = durability.committedState()
        // The history is in seq order: start at the first batch past this seq (a binary
        // search; the history holds at least the resume window).
        let start = stored.history.partitioningIndex { $0.lastSeq > live.seq }
        for batch in stored.history[start...] {
            guard batch.events.first?.seq == live.seq + 1 else { break } // not contiguous: wait for more
            live.apply(batch.events.map(\.event))
            live.seq = batch.lastSeq
            publish([batch])
        }
    }
}
