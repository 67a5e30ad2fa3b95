// The JSON shapes of PROTOCOL.md for state and events, both ways. The daemon encodes
// with these, tests and tools decode with them: one definition for everyone.

/// A frame or object that does not have the shape PROTOCOL.md gives it.
public struct WireError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

extension JSONValue {
    func field(_ key: String) throws(WireError) -> JSONValue {
        guard let v = self[key] else { throw WireError("missing '\(key)'") }
        return v
    }
    func string(_ key: String) throws(WireError) -> String {
        guard let s = try field(key).stringValue else { throw WireError("'\(key)' is not a string") }
        return s
    }
    func optionalString(_ key: String) throws(WireError) -> String? {
        let v = try field(key)
        if v.isNull { return nil }
        guard let s = v.stringValue else { throw WireError("'\(key)' is not a string or null") }
        return s
    }
    func int(_ key: String) throws(WireError) -> Int {
        guard let i = try field(key).intValue else { throw WireError("'\(key)' is not an integer") }
        return i
    }
    func double(_ key: String) throws(WireError) -> Double {
        guard let d = try field(key).doubleValue else { throw WireError("'\(key)' is not a number") }
        // A literal too large for a Double reads as infinity, which JSON cannot write back.
        guard d.isFinite else { throw WireError("'\(key)' is not a finite number") }
        return d
    }
    /// An integer in `0...Limits.maxCount` (a seq, a counter or a count).
    func count(_ key: String) throws(WireError) -> Int {
        let i = try int(key)
        guard i >= 0, i <= Limits.maxCount else { throw WireError("'\(key)' is out of range") }
        return i
    }
    /// An object of node names to counts.
    func nodes(_ key: String) throws(WireError) -> [String: Int] {
        guard let members = try field(key).objectValue else { throw WireError("'\(key)' is not an object") }
        var nodes: [String: Int] = [:]
        for (name, value) in members {
            guard let n = value.intValue, n >= 0, n <= Limits.maxCount else { throw WireError("'\(key).\(name.prefix(40))' is not a count") }
            guard nodes.updateValue(n, forKey: name) == nil else { throw WireError("'\(key)' names '\(name.prefix(40))' twice") }
        }
        return nodes
    }
    func optionalNode() throws(WireError) -> String? {
        self["node"] == nil ? nil : try string("node")
    }
    func array(_ key: String) throws(WireError) -> [JSONValue] {
        guard let a = try field(key).arrayValue else { throw WireError("'\(key)' is not an array") }
        return a
    }
}

extension ClientInfo {
    public var json: JSONValue { .object([("id", .string(id)), ("name", .string(name))]) }
    public init(json: JSONValue) throws(WireError) { self.init(id: try json.string("id"), name: try json.string("name")) }
}

extension Page {
    public var json: JSONValue {
        .object([("id", .string(id)), ("route", .string(route)), ("appeared", .bool(appeared)), ("appearCount", .int(appearCount))])
    }
    public init(json: JSONValue) throws(WireError) {
        guard let appeared = try json.field("appeared").boolValue else { throw WireError("'appeared' is not a boolean") }
        self.init(id: try json.string("id"), route: try json.string("route"), appeared: appeared, appearCount: try json.count("appearCount"))
    }
}

extension TabState {
    /// The full tab object of snapshots, `tabAdded` and `tabUpdated`; values by sorted key.
    public var json: JSONValue {
        .object([
            ("id", .string(info.id)), ("title", .string(info.title)), ("icon", .string(info.icon)),
            ("color", .string(info.color)), ("badge", .string(info.badge)),
            ("stack", .array(stack.map(\.json))),
            ("scroll", .double(scroll)),
            ("values", .object(values.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })),
        ])
    }

    public init(json: JSONValue) throws(WireError) {
        let info = TabInfo(id: try json.string("id"), title: try json.string("title"), icon: try json.string("icon"),
                           color: try json.string("color"), badge: try json.optionalString("badge"))
        var stack: [Page] = []
        for p in try json.array("stack") { stack.append(try Page(json: p)) }
        guard !stack.isEmpty else { throw WireError("tab '\(info.id)' has an empty stack") }
        guard let values = try json.field("values").objectValue else { throw WireError("'values' is not an object") }
        self.init(info: info, stack: stack, scroll: try json.double("scroll"),
                  values: Dictionary(values, uniquingKeysWith: { _, last in last }))
    }
}

extension Snapshot {
    /// The wire form (at most 100 clients listed).
    public var json: JSONValue { json(capped: true) }

    /// `capped: false` lists every client: the form a state file stores.
    public func json(capped: Bool) -> JSONValue {
        let c = capped ? self.capped : self
        return .object([
            ("seq", .int(c.seq)), ("selected", .string(c.selected)), ("scrollToTop", .int(c.scrollToTop)),
            ("tabs", .array(c.tabs.map(\.json))),
            ("presence", .string(c.presence.rawValue)),
            ("clientCount", .int(c.clientCount)), ("clients", .array(c.clients.map(\.json))),
        ] + (c.nodes.map { [("nodes", Self.json(nodes: $0))] } ?? []))
    }

    /// A map of node names to counts, by sorted name.
    static func json(nodes: [String: Int]) -> JSONValue {
        .object(nodes.sorted { $0.key < $1.key }.map { ($0.key, .int($0.value)) })
    }

    /// Refuses what no coordinator could have written, which a restored coordinator
    /// would trap on: a tab or client listed twice, a count out of range.
    public init(json: JSONValue) throws(WireError) {
        var tabs: [TabState] = []
        var tabIDs = Set<TabID>()
        for t in try json.array("tabs") {
            let tab = try TabState(json: t)
            guard tabIDs.insert(tab.id).inserted else { throw WireError("tab '\(tab.id.prefix(40))' is listed twice") }
            tabs.append(tab)
        }
        var clients: [ClientInfo] = []
        var clientIDs = Set<ClientID>()
        for c in try json.array("clients") {
            let client = try ClientInfo(json: c)
            guard clientIDs.insert(client.id).inserted else { throw WireError("client '\(client.id.prefix(40))' is listed twice") }
            clients.append(client)
        }
        let clientCount = try json.count("clientCount")
        guard clientCount >= clients.count else { throw WireError("'clientCount' is below the clients listed") }
        // A snapshot of a tabd before presence modes (a stored one, too) is listed.
        let presence: PresenceMode
        switch json["presence"] {
        case nil: presence = .listed
        case let .string(s)?:
            guard let mode = PresenceMode(rawValue: s) else { throw WireError("'presence' is neither 'listed' nor 'counted'") }
            presence = mode
        default: throw WireError("'presence' is not a string")
        }
        let nodes = try json["nodes"].map { (_) throws(WireError) in try json.nodes("nodes") }
        if presence == .counted {
            guard clients.isEmpty else { throw WireError("a counted snapshot lists clients") }
            if let nodes {
                guard let total = try? Roster.sum(nodes), total == clientCount else { throw WireError("'nodes' do not add up to 'clientCount'") }
            }
        } else if nodes != nil {
            throw WireError("a listed snapshot has 'nodes'")
        }
        self.init(seq: try json.count("seq"), selected: try json.string("selected"), scrollToTop: try json.count("scrollToTop"),
                  tabs: tabs, clients: clients, clientCount: clientCount, presence: presence, nodes: nodes)
    }
}

extension SequencedEvent {
    public var json: JSONValue {
        var m: [(String, JSONValue)] = [("seq", .int(seq)), ("kind", .string(event.kind))]
        switch event {
        case let .selected(from, to): m += [("from", .string(from)), ("to", .string(to))]
        case let .firstAppear(t, p), let .appear(t, p), let .disappear(t, p): m += [("tab", .string(t)), ("page", .string(p))]
        case let .pushed(t, p, route): m += [("tab", .string(t)), ("page", .string(p)), ("route", .string(route))]
        case let .popped(t, pages): m += [("tab", .string(t)), ("pages", .array(pages.map(JSONValue.string)))]
        case let .scrollToTop(t, count): m += [("tab", .string(t)), ("count", .int(count))]
        case let .scrolled(t, offset): m += [("tab", .string(t)), ("offset", .double(offset))]
        case let .valueSet(t, key, value): m += [("tab", .string(t)), ("key", .string(key)), ("value", value)]
        case let .tabAdded(tab, index): m += [("tab", tab.json), ("index", .int(index))]
        case let .tabUpdated(tab): m += [("tab", tab.json)]
        case let .tabMoved(t, index): m += [("tab", .string(t)), ("index", .int(index))]
        case let .tabRemoved(t): m += [("tab", .string(t))]
        case let .clientJoined(client): m += [("client", client.json)]
        case let .clientLeft(id): m += [("client", .string(id))]
        case let .presenceCounted(count, nodes):
            m.append(("count", .int(count)))
            if let nodes { m.append(("nodes", Snapshot.json(nodes: nodes))) }
        case let .clientCount(node, count):
            if let node { m.append(("node", .string(node))) }
            m.append(("count", .int(count)))
        case let .presenceListed(node, clients):
            if let node { m.append(("node", .string(node))) }
            m.append(("clients", .array(clients.map(\.json))))
        case let .clientIdsReserved(node, from, count):
            if let node { m.append(("node", .string(node))) }
            m += [("from", .int(from)), ("count", .int(count))]
        }
        return .object(m)
    }

    public init(json j: JSONValue) throws(WireError) {
        let seq = try j.int("seq")
        let event: Event
        let name = try j.string("kind")
        guard let kind = EventKind(rawValue: name) else { throw WireError("unknown event kind '\(name.prefix(40))'") }
        switch kind {
        case .selected: event = .selected(from: try j.string("from"), to: try j.string("to"))
        case .firstAppear: event = .firstAppear(tab: try j.string("tab"), page: try j.string("page"))
        case .appear: event = .appear(tab: try j.string("tab"), page: try j.string("page"))
        case .disappear: event = .disappear(tab: try j.string("tab"), page: try j.string("page"))
        case .pushed: event = .pushed(tab: try j.string("tab"), page: try j.string("page"), route: try j.string("route"))
        case .popped:
            var pages: [PageID] = []
            for p in try j.array("pages") {
                guard let s = p.stringValue else { throw WireError("'pages' holds a non-string") }
                pages.append(s)
            }
            event = .popped(tab: try j.string("tab"), pages: pages)
        case .scrollToTop: event = .scrollToTop(tab: try j.string("tab"), count: try j.int("count"))
        case .scrolled: event = .scrolled(tab: try j.string("tab"), offset: try j.double("offset"))
        case .valueSet: event = .valueSet(tab: try j.string("tab"), key: try j.string("key"), value: try j.field("value"))
        case .tabAdded: event = .tabAdded(try TabState(json: try j.field("tab")), index: try j.int("index"))
        case .tabUpdated: event = .tabUpdated(try TabState(json: try j.field("tab")))
        case .tabMoved: event = .tabMoved(tab: try j.string("tab"), index: try j.int("index"))
        case .tabRemoved: event = .tabRemoved(tab: try j.string("tab"))
        case .clientJoined: event = .clientJoined(try ClientInfo(json: try j.field("client")))
        case .clientLeft: event = .clientLeft(try j.string("client"))
        case .presenceCounted:
            let nodes = try j["nodes"].map { (_) throws(WireError) in try j.nodes("nodes") }
            event = .presenceCounted(count: try j.count("count"), nodes: nodes)
        case .clientCount: event = .clientCount(node: try j.optionalNode(), count: try j.count("count"))
        case .presenceListed:
            var clients: [ClientInfo] = []
            for c in try j.array("clients") { clients.append(try ClientInfo(json: c)) }
            event = .presenceListed(node: try j.optionalNode(), clients: clients)
        case .clientIdsReserved:
            event = .clientIdsReserved(node: try j.optionalNode(), from: try j.count("from"), count: try j.count("count"))
        }
        self.init(seq: seq, event: event)
    }
}
