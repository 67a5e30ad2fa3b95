// One typed method per command. Each returns once tabd answered: the ack's seq (the
// room's seq after the command; a command that changed nothing is acked at the seq it
// saw), with `state` already holding the command's events. A refused command throws
// `TabdClientError.refused` with the protocol's code and changes nothing; every other
// failure is a `TabdClientError` too, except a cancelled task's: `CancellationError`
// (see TabdClient's **Cancelling**). A nil `tab` means the selected tab.
extension TabdClient {
    /// Selects `tab`: the visible page disappears, the tab's top page appears.
    @discardableResult
    public func select(_ tab: TabID) async throws -> Int { try await perform(.select(tab: tab)) }

    /// A tap on `tab`'s item, as a native tab bar reacts: selects it; on the selected tab
    /// pops to its root; at the root, scrolls to the top (the scroll-to-top counter goes up).
    @discardableResult
    public func tap(_ tab: TabID) async throws -> Int { try await perform(.tap(tab: tab)) }

    /// Pushes a page with `route` onto `tab`'s stack.
    @discardableResult
    public func push(_ route: String, on tab: TabID? = nil) async throws -> Int {
        try await perform(.push(tab: tab, route: route))
    }

    /// Pops `tab`'s top page (at the root: nothing changes).
    @discardableResult
    public func pop(on tab: TabID? = nil) async throws -> Int { try await perform(.pop(tab: tab)) }

    /// Pops `tab` to its first page.
    @discardableResult
    public func popToRoot(on tab: TabID? = nil) async throws -> Int { try await perform(.popToRoot(tab: tab)) }

    /// Records `tab`'s scroll offset.
    @discardableResult
    public func scroll(to offset: Double, on tab: TabID? = nil) async throws -> Int {
        try await perform(.scroll(tab: tab, offset: offset))
    }

    /// Stores `value` under `key` on `tab`; `.null` removes the key.
    @discardableResult
    public func set(_ key: String, to value: JSONValue, on tab: TabID? = nil) async throws -> Int {
        try await perform(.set(tab: tab, key: key, value: value))
    }

    /// Adds a tab at `index` (default: the end).
    @discardableResult
    public func addTab(_ tab: TabInfo, at index: Int? = nil) async throws -> Int {
        try await perform(.addTab(tab, index: index))
    }

    /// Changes a tab's title, icon, color or badge (the fields that are set).
    @discardableResult
    public func updateTab(_ update: TabUpdate) async throws -> Int { try await perform(.updateTab(update)) }

    /// Moves `tab` to `index`.
    @discardableResult
    public func moveTab(_ tab: TabID, to index: Int) async throws -> Int {
        try await perform(.moveTab(tab: tab, index: index))
    }

    /// Removes `tab` (not the only one); when it was selected, its neighbour is.
    @discardableResult
    public func removeTab(_ tab: TabID) async throws -> Int { try await perform(.removeTab(tab: tab)) }

    /// A fresh snapshot from tabd (it does not replace `state`, which equals it but may
    /// list more than its first 100 clients).
    public func sync() async throws -> Snapshot {
        guard case let .snapshot(snapshot) = try await request(.sync) else { throw TabdClientError.protocolViolation("'sync' was not answered with a snapshot") }
        return snapshot
    }

    /// One page of the room's connected clients, in join order (in a big room, whose
    /// `state` only counts them): those after `after` (the `next` of an earlier page; nil
    /// for the first), at most `limit` (1–1,000). In a cluster, those of the node this
    /// client is connected to.
    public func clients(after: ClientID? = nil, limit: Int? = nil) async throws -> ClientPage {
        guard case let .clients(page, _) = try await request(.clients(after: after, limit: limit)) else {
            throw TabdClientError.protocolViolation("'clients' was not answered with a page of clients")
        }
        return page
    }

    /// Every connected client, page after page of 1,000 (in a cluster, this node's).
    public func allClients() async throws -> [ClientInfo] {
        var all: [ClientInfo] = []
        var after: ClientID?
        repeat {
            let page = try await clients(after: after, limit: Limits.maxClientsPage)
            all += page.clients
            after = page.next
        } while after != nil
        return all
    }

    /// A round trip to tabd; returns how long it took.
    @discardableResult
    public func ping() async throws -> Duration {
        let clock = ContinuousClock()
        let start = clock.now
        guard case .pong = try await request(.ping) else { throw TabdClientError.protocolViolation("'ping' was not answered with a pong") }
        return clock.now - start
    }
}
