/// A tab's id: `[a-z0-9_-]{1,32}`.
public typealias TabID = String
/// A page's id (`p1`, `p2`, …): never reused within an epoch.
public typealias PageID = String
/// A room's id: `[A-Za-z0-9_-]{1,64}`, case-sensitive (see ``Limits/isRoomID(_:)``).
public typealias RoomID = String
/// A connected client's id (`c1`, `c2`, …), or ``Coordinator/daemonID`` for the daemon itself.
public typealias ClientID = String

/// A connected client, as presence events and snapshots show it.
public struct ClientInfo: Sendable, Equatable, Hashable, Identifiable {
    public var id: ClientID
    public var name: String
    public init(id: ClientID, name: String) { self.id = id; self.name = name }
}

/// What a tab looks like in the bar (seed 001): title, SF-Symbol-style icon, color, badge.
public struct TabInfo: Sendable, Equatable, Identifiable {
    public var id: TabID
    public var title: String
    public var icon: String
    /// `#RRGGBB`, upper case.
    public var color: String
    public var badge: String?

    public init(id: TabID, title: String, icon: String, color: String, badge: String? = nil) {
        self.id = id; self.title = title; self.icon = icon; self.color = color; self.badge = badge
    }

    /// Seed 001's three tabs, the default when no `--tabs` file and no stored state exist.
    public static let defaults: [TabInfo] = [
        TabInfo(id: "home", title: "Home", icon: "house", color: "#FF3B30"),
        TabInfo(id: "favorites", title: "Favorites", icon: "heart", color: "#007AFF"),
        TabInfo(id: "profile", title: "Profile", icon: "person", color: "#34C759"),
    ]
}

/// One page of a tab's navigation stack.
public struct Page: Sendable, Equatable, Identifiable {
    public var id: PageID
    public var route: String
    /// Whether its `firstAppear` has happened (it then never happens again).
    public var appeared: Bool
    /// How many times it became the visible page.
    public var appearCount: Int

    public init(id: PageID, route: String, appeared: Bool = false, appearCount: Int = 0) {
        self.id = id; self.route = route; self.appeared = appeared; self.appearCount = appearCount
    }

    /// The route of every tab's first page.
    public static let rootRoute = "root"
}
