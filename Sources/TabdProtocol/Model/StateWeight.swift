import Synchronization

/// The latest weight of a room's state (``StateWeight``), readable from any thread: what
/// the gateway charges a `sync` to the connection's byte budget.
public final class StateBytesGauge: Sendable {
    private let bytes = Atomic<Int>(0)
    public init() {}
    public var value: Int { bytes.load(ordering: .relaxed) }
    package func set(_ value: Int) { bytes.store(value, ordering: .relaxed) }
}

/// What a room's state weighs in bytes, about as its snapshot's JSON does (never less than
/// the JSON of its tabs, stacks and values, give or take a few bytes per field): what the
/// bound on a room's state (``Coordinator/Configuration/maxStateBytes``) counts. The bound
/// makes the cost of every snapshot — each `sync`, welcome and resume, the API's reads —
/// bounded too.
///
/// A tab's weight is measured in full once (``tab(_:)``), then kept by ``change(of:to:)``
/// as its events apply: the cost of a command is that of what it changes.
public enum StateWeight {
    /// Room for a number (a count, a scroll offset) as the snapshot writes it.
    private static let number = 24

    /// A JSON string's size, quotes and escapes included.
    static func string(_ s: String) -> Int { JSONValue.string(s).compactSize(limit: Int.max - 1) }

    /// `{"id":…,"route":…,"appeared":…,"appearCount":…},`
    public static func page(_ page: Page) -> Int { 48 + number + string(page.id) + string(page.route) }

    /// `"key":value,` in a tab's `values`.
    public static func value(_ key: String, _ value: JSONValue) -> Int {
        string(key) + 2 + value.compactSize(limit: Int.max - 1)
    }

    /// The tab object's fields around its stack and values: `{"id":…,"title":…,"icon":…,
    /// "color":…,"badge":…,"stack":[],"scroll":…,"values":{}},`
    public static func info(_ info: TabInfo) -> Int {
        86 + number + string(info.id) + string(info.title) + string(info.icon) + string(info.color)
            + (info.badge.map(string) ?? 4)
    }

    /// One tab, measured in full.
    public static func tab(_ state: TabState) -> Int {
        state.stack.reduce(info(state.info)) { $0 + page($1) } + state.values.reduce(0) { $0 + value($1.key, $1.value) }
    }

    /// How much `event` changes the weight of `state`, the tab it concerns, measured
    /// before it applies: what it adds less what it takes away. 0 for what changes no
    /// size (lifecycle, scrolling, other tabs' events).
    public static func change(of event: Event, to state: TabState) -> Int {
        switch event {
        case let .pushed(_, page, route):
            return Self.page(Page(id: page, route: route))
        case let .popped(_, pages):
            return -state.stack.suffix(pages.count).reduce(0) { $0 + Self.page($1) }
        case let .valueSet(_, key, new):
            let old = state.values[key].map { value(key, $0) } ?? 0
            return (new.isNull ? 0 : value(key, new)) - old
        case let .tabUpdated(updated):
            return info(updated.info) - info(state.info)
        default:
            return 0
        }
    }
}
