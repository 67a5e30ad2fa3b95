import Locking
/// One thing that happened to the shared tab state. The kinds and fields are those of
/// PROTOCOL.md; the order in which commands produce them is SEMANTICS.md's table.
/// Every kind of event, by its wire name: the one place the names are written. The encoder
/// writes ``Event/kind``, the decoder (``SequencedEvent/init(json:)``) switches over these
/// cases (so a kind it cannot read does not compile), and `Tests/e2e/test_event_kinds.py`
/// checks the browser's model, its types and the page's log against this list.
public enum EventKind: String, CaseIterable, Sendable {
    case selected, firstAppear, appear, disappear, pushed, popped, scrollToTop, scrolled, valueSet
    case tabAdded, tabUpdated, tabMoved, tabRemoved
    case clientJoined, clientLeft, presenceCounted, clientCount, presenceListed, clientIdsReserved

    /// The fields an event of this kind carries besides `seq` and `kind`, in the order the
    /// encoder writes them, and whether each is always there: the one declaration of them.
    /// `EventDeclarationTests` holds the encoder, the decoder and the JSON schema
    /// (docs/schema/event.json) to it.
    public var fields: [EventField] {
        switch self {
        case .selected: ["from", "to"]
        case .firstAppear, .appear, .disappear: ["tab", "page"]
        case .pushed: ["tab", "page", "route"]
        case .popped: ["tab", "pages"]
        case .scrollToTop: ["tab", "count"]
        case .scrolled: ["tab", "offset"]
        case .valueSet: ["tab", "key", "value"]
        case .tabAdded: ["tab", "index"]
        case .tabUpdated, .tabRemoved: ["tab"]
        case .tabMoved: ["tab", "index"]
        case .clientJoined, .clientLeft: ["client"]
        case .presenceCounted: ["count", .optional("nodes")]
        case .clientCount: [.optional("node"), "count"]
        case .presenceListed: [.optional("node"), "clients"]
        case .clientIdsReserved: [.optional("node"), "from", "count"]
        }
    }
}

/// A field of an event kind (``EventKind/fields``): its wire name, and whether every event
/// of the kind has it (a cluster's `node` and `nodes` are there only in a cluster).
public struct EventField: Sendable, Equatable, ExpressibleByStringLiteral {
    public let name: String
    public let required: Bool

    public init(stringLiteral name: String) { self.name = name; required = true }
    private init(name: String, required: Bool) { self.name = name; self.required = required }

    public static func optional(_ name: String) -> EventField { EventField(name: name, required: false) }
}

public enum Event: Sendable, Equatable {
    case selected(from: TabID, to: TabID)
    case firstAppear(tab: TabID, page: PageID)
    case appear(tab: TabID, page: PageID)
    case disappear(tab: TabID, page: PageID)
    case pushed(tab: TabID, page: PageID, route: String)
    /// Removed pages, top first.
    case popped(tab: TabID, pages: [PageID])
    /// `count` is the scroll-to-top counter's new value.
    case scrollToTop(tab: TabID, count: Int)
    case scrolled(tab: TabID, offset: Double)
    /// `value == .null` removed the key.
    case valueSet(tab: TabID, key: String, value: JSONValue)
    /// The full new tab, as a snapshot shows it, and its position.
    case tabAdded(TabState, index: Int)
    /// The full tab after the update.
    case tabUpdated(TabState)
    /// `index` is the tab's position after the move.
    case tabMoved(tab: TabID, index: Int)
    case tabRemoved(tab: TabID)
    case clientJoined(ClientInfo)
    case clientLeft(ClientID)
    /// The room counts its clients from here on (PRESENCE: a listed room crossed
    /// `--presence-limit`): `count` clients after the batch's joins; `nodes`, in a
    /// cluster, each node's share.
    case presenceCounted(count: Int, nodes: [String: Int]?)
    /// A counted room's count is now `count` (in a cluster: `node`'s share of it).
    case clientCount(node: String?, count: Int)
    /// A counted room emptied and lists its clients again, starting from `clients`.
    case presenceListed(node: String?, clients: [ClientInfo])
    /// Client numbers `from`…`from + count - 1` are taken (by `node`, in a cluster): a
    /// counted room's joins use them without an event each.
    case clientIdsReserved(node: String?, from: Int, count: Int)

    /// The wire name of the event's kind (``EventKind``: every name is declared there once).
    public var kind: String { eventKind.rawValue }

    /// The event's kind.
    public var eventKind: EventKind {
        switch self {
        case .selected: .selected
        case .firstAppear: .firstAppear
        case .appear: .appear
        case .disappear: .disappear
        case .pushed: .pushed
        case .popped: .popped
        case .scrollToTop: .scrollToTop
        case .scrolled: .scrolled
        case .valueSet: .valueSet
        case .tabAdded: .tabAdded
        case .tabUpdated: .tabUpdated
        case .tabMoved: .tabMoved
        case .tabRemoved: .tabRemoved
        case .clientJoined: .clientJoined
        case .clientLeft: .clientLeft
        case .presenceCounted: .presenceCounted
        case .clientCount: .clientCount
        case .presenceListed: .presenceListed
        case .clientIdsReserved: .clientIdsReserved
        }
    }

    /// The part of the room's state the event belongs to: the one declaration that every
    /// fold (``Snapshot``, the coordinator, a cluster's room) and every router reads.
    public var part: StatePart {
        switch self {
        case .selected, .tabAdded, .tabMoved, .tabRemoved:
            .bar
        case let .firstAppear(t, _), let .appear(t, _), let .disappear(t, _), let .pushed(t, _, _),
             let .popped(t, _), let .scrolled(t, _), let .valueSet(t, _, _), let .scrollToTop(t, _):
            .tab(t)
        case let .tabUpdated(tab):
            .tab(tab.id)
        case .clientJoined, .clientLeft, .presenceCounted, .clientCount, .presenceListed, .clientIdsReserved:
            .presence
        }
    }

    /// Whether the event is about who is connected (the roster's, not the tabs').
    public var isPresence: Bool { part == .presence }

    /// The tab whose own state (stack, scroll, values, info) the event changes or
    /// concerns; nil for events of the bar and of presence.
    public var tabScope: TabID? {
        if case let .tab(id) = part { id } else { nil }
    }
}

/// A part of a room's state, each changed by its own fold: ``TabBar/apply(_:)``,
/// ``TabState/apply(_:selected:)`` and ``Roster/apply(_:)``.
public enum StatePart: Sendable, Equatable {
    /// The tabs' order and the selection.
    case bar
    /// One tab's own state: stack, scroll, values, info. `scrollToTop` also moves the
    /// room's scroll-to-top counter (``ScrollCounter/apply(_:to:)``).
    case tab(TabID)
    /// Who is connected.
    case presence
}

/// An event with its place in the total order.
public struct SequencedEvent: Sendable, Equatable {
    public var seq: Int
    public var event: Event
    public init(seq: Int, event: Event) { self.seq = seq; self.event = event }
}

/// The events of one command (or one presence batch): consecutive seqs, never empty,
/// sent to every client as one `events` frame.
public struct EventBatch: Sendable, Equatable {
    /// The client whose command caused them, or ``Coordinator/daemonID``.
    public let by: ClientID
    /// The command's `ref`, if it had one.
    public let ref: String?
    public let events: [SequencedEvent]
    private let frame = FrameCache()

    public init(by: ClientID, ref: String?, events: [SequencedEvent]) {
        self.by = by; self.ref = ref; self.events = events
    }

    public var firstSeq: Int { events.first!.seq }
    public var lastSeq: Int { events.last!.seq }

    /// The batch's `events` frame, compact UTF-8 JSON, encoded once however often it is
    /// asked for: the state store writes it and the broadcast sends the same bytes.
    public var frameBytes: [UInt8] { frame.bytes { ServerFrame.events(self).bytes } }

    public static func == (a: EventBatch, b: EventBatch) -> Bool {
        a.by == b.by && a.ref == b.ref && a.events == b.events
    }
}

/// Holds a batch's encoded frame once someone has asked for it.
final class FrameCache: Sendable {
    private let stored = Locked<[UInt8]?>(nil)

    func bytes(_ encode: () -> [UInt8]) -> [UInt8] {
        if let bytes = stored.withLock({ $0 }) { return bytes }
        let bytes = encode() // outside the lock; a rare second encoder makes the same bytes
        return stored.withLock { cached in
            if let cached { return cached }
            cached = bytes
            return bytes
        }
    }
}
