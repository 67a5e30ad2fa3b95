extension Coordinator {
    /// A connection that wants to join: its display name and where it wants to resume.
    public struct JoinRequest: Sendable {
        public var name: String?
        public var resume: Int?
        public var epoch: String?
        public init(name: String? = nil, resume: Int? = nil, epoch: String? = nil) {
            self.name = name; self.resume = resume; self.epoch = epoch
        }
    }

    /// What the presence rules read.
    var presenceState: PresenceRules.State {
        PresenceRules.State(roster: live.roster, members: members, nextClient: live.ids.nextClient, reserved: reservedIDs,
                            lastReport: lastCountReport, owner: { [durability] in durability?.owner(of: $0) })
    }

    /// Registers joining clients and forgets leaving ones in one batch (by `tabd`),
    /// and returns a welcome per join, in order, once the batch is committed. Each welcome
    /// includes the whole batch: a snapshot at its last seq, or a replay that ends with it.
    /// Throws `unavailable` (and changes nothing) when the store cannot commit the batch.
    ///
    /// A listed room's batch lists each leave and join; a counted room's emits what
    /// ``PresenceRules`` decide (a reserved block of ids, a count now and then, or the
    /// room listed again). `now` is when the batch is decided, for the count's interval.
    public func presence(joining: [JoinRequest], leaving: [ClientID] = [], forgettingNodes: Set<String> = [],
                         immediately: Bool = false, now: ContinuousClock.Instant = .now) async throws(CommandError) -> [Welcome] {
        let requests = joining.map { request -> PresenceRules.Join in
            let name = request.name.map { String(String.UnicodeScalarView($0.unicodeScalars.prefix(Limits.maxClientNameLength))) }
            return PresenceRules.Join(name: (name?.isEmpty ?? true) ? nil : name)
        }
        while true {
            // Decided, applied and recorded in one step; the welcomes are taken at the seq
            // they hold, and go once it is committed.
            let decision = presenceRules.decide(presenceState, joining: requests, leaving: leaving, forgettingNodes: forgettingNodes,
                                                immediately: immediately, now: now)
            live.apply(decision.events)
            let wait = record(decision.events, by: Self.daemonID, ref: nil)?.1 ?? lastUnpublished?.wait
            for id in decision.left { members.remove(id) }
            for client in decision.joined { members.add(client) }
            if decision.reserved != reservedIDs { (reservedIDs, reservedBy) = (decision.reserved, wait) }
            let reportBefore = lastCountReport
            if decision.reported { lastCountReport = now }
            let welcomes = welcomes(for: joining, clients: decision.joined)
            guard let wait, let error = await waitForCommit(wait) else { return welcomes }
            // Rolled back: these joins are not in the room.
            for client in decision.joined { members.remove(client.id) }
            if decision.reported, lastCountReport == now { lastCountReport = reportBefore }
            if error.isConflict { continue } // another writer took the seq: decide again on what it left
            throw error
        }
    }

    /// A welcome per join, at the seq applied last: a replay of what the client missed
    /// when it asked to resume and that is kept (and weighs no more than a snapshot may),
    /// a snapshot otherwise.
    private func welcomes(for joining: [JoinRequest], clients: [ClientInfo]) -> [Welcome] {
        var shared: Snapshot?
        return zip(joining, clients).map { request, client in
            if let resume = request.resume, request.epoch == nil || request.epoch == epoch,
               let missed = output.missed(after: resume, pending: pipeline.pendingBatches, within: max(live.maxWeight, live.weight)) {
                return Welcome(client: client, epoch: epoch, resumed: true, snapshot: nil, replay: missed, seq: live.seq)
            }
            if shared == nil { shared = live.snapshot() }
            return Welcome(client: client, epoch: epoch, resumed: false, snapshot: shared, replay: [], seq: live.seq)
        }
    }

    /// When a counted room's changed count is due to be reported (``reportPresence(immediately:now:)``),
    /// or nil when the stream's count is current.
    public var presenceReportDue: ContinuousClock.Instant? {
        presenceRules.reportDue(roster: live.roster, members: members, lastReport: lastCountReport)
    }

    /// Reports a counted room's count if it changed and its interval has passed (or at
    /// once, `immediately`), and lists again in a listed room the clients connected here
    /// that it does not list.
    public func reportPresence(immediately: Bool = false, now: ContinuousClock.Instant = .now) async throws(CommandError) {
        _ = try await presence(joining: [], leaving: [], immediately: immediately, now: now)
    }

    /// One client joins (see ``presence(joining:leaving:forgettingNodes:immediately:now:)``).
    public func connect(_ request: JoinRequest = .init()) async throws(CommandError) -> Welcome {
        try await presence(joining: [request])[0]
    }

    /// One client leaves: `clientLeft`, unless it was not connected.
    public func disconnect(_ id: ClientID) async throws(CommandError) {
        _ = try await presence(joining: [], leaving: [id])
    }
}
