/// The fields an `updateTab` changes; nil leaves a field as it is.
public struct TabUpdate: Sendable, Equatable {
    public var id: TabID
    public var title: String?
    public var icon: String?
    public var color: String?
    /// nil: unchanged; `.some(nil)`: clear the badge; `.some(text)`: set it.
    public var badge: String??

    public init(id: TabID, title: String? = nil, icon: String? = nil, color: String? = nil, badge: String?? = nil) {
        self.id = id; self.title = title; self.icon = icon; self.color = color; self.badge = badge
    }
}

/// A client's request, as PROTOCOL.md's "Client → server" table defines it.
/// A nil `tab` means the selected tab.
public enum Command: Sendable, Equatable {
    case select(tab: TabID)
    case tap(tab: TabID)
    case push(tab: TabID?, route: String)
    case pop(tab: TabID?)
    case popToRoot(tab: TabID?)
    case scroll(tab: TabID?, offset: Double)
    case set(tab: TabID?, key: String, value: JSONValue)
    case addTab(TabInfo, index: Int?)
    case updateTab(TabUpdate)
    case moveTab(tab: TabID, index: Int)
    case removeTab(tab: TabID)
    case sync
    case ping
    /// One page of the room's connected clients, in join order: those after the cursor
    /// `after` (a `next` of an earlier answer), at most `limit` (1–1000, default 100).
    case clients(after: ClientID?, limit: Int?)
}

/// Every command kind, declared once: its wire name (the raw value), its fields, whether it
/// changes the room, and what it does. Parsing (which fields a frame keeps, their presence and
/// types), encoding, the role rule (a view token may send only what changes nothing), metrics,
/// tabctl's commands and the random generators all read this table; the rules that apply a
/// kind are the coordinator's.
public enum CommandKind: String, CaseIterable, Sendable {
    case select, tap, push, pop, popToRoot, scroll, set, addTab, updateTab, moveTab, removeTab, sync, ping, clients

    public var declaration: CommandDeclaration { Self.table[self]! }

    /// The kind's name on a command line (tabctl's), in kebab case: `popToRoot` → `pop-to-root`.
    public var commandLineName: String {
        rawValue.reduce(into: "") { out, c in out += c.isUppercase ? "-" + c.lowercased() : String(c) }
    }

    private static let table: [CommandKind: CommandDeclaration] = Dictionary(uniqueKeysWithValues: allCases.map { kind in
        (kind, declare(kind))
    })

    /// The table itself: a switch, so that the compiler asks for a new kind's entry.
    private static func declare(_ kind: CommandKind) -> CommandDeclaration {
        let tab = CommandField("tab", .string, .required, "the tab")
        let tabOrSelected = CommandField("tab", .string, .optional, "the tab (default: the selected one)")
        func change(_ fields: [CommandField], _ summary: String) -> CommandDeclaration { .init(fields, summary) }
        func query(_ fields: [CommandField], _ summary: String) -> CommandDeclaration { .init(fields, changesState: false, summary) }
        /// A tab's look (seed 001), given whole by `addTab` and in part by `updateTab`: its id, then the rest.
        func look(_ presence: CommandField.Presence, badge: CommandField.Presence) -> [CommandField] {
            [.init("id", .string, .required, "the tab's id")]
                + [("title", "its title"), ("icon", "an SF Symbol name (house, heart, person, ...)"), ("color", "a #RRGGBB colour")]
                .map { .init($0.0, .string, presence, $0.1) }
                + [.init("badge", .string, badge, badge == .optionalOrNull ? "its badge; null removes it" : "its badge")]
        }
        switch kind {
        case .select: return change([tab], "select a tab")
        case .tap: return change([tab], "tap a tab's item (select; pop to root; scroll to top)")
        case .push: return change([tabOrSelected, .init("route", .string, .required, "the page's route")], "push a page onto a tab's stack")
        case .pop: return change([tabOrSelected], "pop a tab's top page")
        case .popToRoot: return change([tabOrSelected], "pop a tab to its first page")
        case .scroll: return change([tabOrSelected, .init("offset", .number, .required, "the offset in points")], "record a tab's scroll offset")
        case .set:
            return change([tabOrSelected, .init("key", .string, .required, "the value's name"),
                           .init("value", .json, .requiredOrNull, "any JSON value; null removes the key")],
                          "store a value on a tab (null removes it)")
        case .addTab:
            return change([.init("tab", .object(look(.required, badge: .optional)), .required, "the tab"),
                           .init("index", .integer, .optional, "its place (default: last)")], "add a tab")
        case .updateTab:
            return change([.init("tab", .object(look(.optional, badge: .optionalOrNull)), .required, "the changes")],
                          "change a tab's title, icon, colour or badge")
        case .moveTab: return change([tab, .init("index", .integer, .required, "its new place")], "move a tab to a position")
        case .removeTab: return change([tab], "remove a tab")
        case .sync: return query([], "the room's state")
        case .ping: return query([], "a round trip to tabd")
        case .clients:
            return query([.init("after", .string, .optional, "the page after this client (a `next` of an earlier page)"),
                          .init("limit", .integer, .optional, "clients per page, 1 to 1000 (default 100)")],
                         "who is connected, a page at a time")
        }
    }
}

extension Command {
    public var kind: CommandKind {
        switch self {
        case .select: .select
        case .tap: .tap
        case .push: .push
        case .pop: .pop
        case .popToRoot: .popToRoot
        case .scroll: .scroll
        case .set: .set
        case .addTab: .addTab
        case .updateTab: .updateTab
        case .moveTab: .moveTab
        case .removeTab: .removeTab
        case .sync: .sync
        case .ping: .ping
        case .clients: .clients
        }
    }

    /// The command from fields that ``CommandFields`` has checked against its kind's
    /// declaration: presence and types hold here.
    init(_ kind: CommandKind, _ f: CommandFields) throws(CommandError) {
        switch kind {
        case .select: self = .select(tab: try f.string("tab"))
        case .tap: self = .tap(tab: try f.string("tab"))
        case .push: self = .push(tab: try f.optionalString("tab"), route: try f.string("route"))
        case .pop: self = .pop(tab: try f.optionalString("tab"))
        case .popToRoot: self = .popToRoot(tab: try f.optionalString("tab"))
        case .scroll: self = .scroll(tab: try f.optionalString("tab"), offset: try f.number("offset"))
        case .set: self = .set(tab: try f.optionalString("tab"), key: try f.string("key"), value: try f.value("value"))
        case .addTab:
            let t = try f.object("tab")
            self = .addTab(TabInfo(id: try t.string("id"), title: try t.string("title"), icon: try t.string("icon"),
                                   color: try t.string("color"), badge: try t.optionalString("badge")),
                           index: try f.optionalInt("index"))
        case .updateTab:
            let t = try f.object("tab")
            self = .updateTab(TabUpdate(id: try t.string("id"), title: try t.optionalString("title"), icon: try t.optionalString("icon"),
                                        color: try t.optionalString("color"), badge: try t.nullableString("badge")))
        case .moveTab: self = .moveTab(tab: try f.string("tab"), index: try f.int("index"))
        case .removeTab: self = .removeTab(tab: try f.string("tab"))
        case .sync: self = .sync
        case .ping: self = .ping
        case .clients: self = .clients(after: try f.optionalString("after"), limit: try f.optionalInt("limit"))
        }
    }

    /// The command's fields by name, as a client frame writes them; absent ones are nil
    /// (`CommandEnvelope.json` orders them as the declaration does).
    var fieldValues: [String: JSONValue?] {
        func s(_ v: String?) -> JSONValue? { v.map(JSONValue.string) }
        switch self {
        case let .select(tab), let .tap(tab), let .removeTab(tab): return ["tab": .string(tab)]
        case let .push(tab, route): return ["tab": s(tab), "route": .string(route)]
        case let .pop(tab), let .popToRoot(tab): return ["tab": s(tab)]
        case let .scroll(tab, offset): return ["tab": s(tab), "offset": .double(offset)]
        case let .set(tab, key, value): return ["tab": s(tab), "key": .string(key), "value": value]
        case let .addTab(info, index):
            return ["tab": .object(CommandFields.members(of: "tab", in: .addTab, [
                "id": .string(info.id), "title": .string(info.title), "icon": .string(info.icon),
                "color": .string(info.color), "badge": s(info.badge),
            ])), "index": index.map(JSONValue.int)]
        case let .updateTab(u):
            return ["tab": .object(CommandFields.members(of: "tab", in: .updateTab, [
                "id": .string(u.id), "title": s(u.title), "icon": s(u.icon), "color": s(u.color),
                "badge": u.badge.map { $0.map(JSONValue.string) ?? .null },
            ]))]
        case let .moveTab(tab, index): return ["tab": .string(tab), "index": .int(index)]
        case .sync, .ping: return [:]
        case let .clients(after, limit): return ["after": s(after), "limit": limit.map(JSONValue.int)]
        }
    }
}
