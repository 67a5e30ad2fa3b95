import Coordinator

/// The room as a value: a command is decided by the same rules the coordinator uses
/// (``CommandRules``) and its events are applied by the fold (``StoredState/apply(_:)``),
/// with no actor, executor or pipeline. Whatever the coordinator's actors and commits do must
/// come to what this does: the differential tests run both on the same commands.
public struct ReferenceRoom: Sendable {
    public private(set) var state: StoredState
    /// The room's state limit in bytes (the rules check a command's growth against it; the
    /// room weighs what its tabs weigh, as the coordinator counts it).
    public var maxWeight: Int

    public init(_ state: StoredState, maxWeight: Int = .max) {
        self.state = state
        self.maxWeight = maxWeight
    }

    /// Decides `command` of `client` and applies its events, returned (none: it changed
    /// nothing). A refusal changes nothing and is thrown.
    @discardableResult
    public mutating func run(_ command: Command, by client: ClientID, ref: String? = nil) throws(CommandError) -> [Event] {
        let snapshot = state.snapshot
        let bar = TabBar(order: snapshot.tabs.map(\.id), selected: snapshot.selected)
        let tabs = Dictionary(uniqueKeysWithValues: snapshot.tabs.map { ($0.id, $0) })
        let room = CommandRules.Room(bar: bar, newPageID: "p\(state.nextPage)", counter: snapshot.scrollToTop,
                                     weight: snapshot.tabs.reduce(0) { $0 + StateWeight.tab($1) }, maxWeight: maxWeight)
        let events = try CommandRules.decide(command, room: room, tabs: tabs)
        guard !events.isEmpty else { return [] }
        let batch = EventBatch(by: client, ref: ref, events: events.enumerated().map { SequencedEvent(seq: snapshot.seq + 1 + $0.offset, event: $0.element) })
        do { try state.apply(batch) } catch {
            preconditionFailure("the rules decided events the fold refuses: \(error)")
        }
        return events
    }
}
