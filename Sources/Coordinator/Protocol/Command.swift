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

    /// The wire name (`type`).
    public var type: String {
        switch self {
        case .select: "select"
        case .tap: "tap"
        case .push: "push"
        case .pop: "pop"
        case .popToRoot: "popToRoot"
        case .scroll: "scroll"
        case .set: "set"
        case .addTab: "addTab"
        case .updateTab: "updateTab"
        case .moveTab: "moveTab"
        case .removeTab: "removeTab"
        case .sync: "sync"
        case .ping: "ping"
        case .clients: "clients"
        }
    }

    /// `sync`, `ping` and `clients`: answered from the state, never a change of it.
    public var isQuery: Bool {
        switch self {
        case .sync, .ping, .clients: true
        default: false
        }
    }

    /// Every wire name, for metrics and documentation.
    public static let allTypes = [
        "select", "tap", "push", "pop", "popToRoot", "scroll", "set",
        "addTab", "updateTab", "moveTab", "removeTab", "sync", "ping", "clients",
    ]
}

/// A command with the `ref` the client gave it.
public struct CommandEnvelope: Sendable, Equatable {
    public var ref: String?
    public var command: Command
    public init(ref: String?, command: Command) { self.ref = ref; self.command = command }
}
