/// An event that does not fit the state it is applied to: the stream is broken, or
/// belongs to another history. Nothing of the event was applied.
public struct FoldError: Error, Sendable, Equatable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// A ``FoldError`` with the seq of the event that did not fit.
public struct ReplayError: Error, Sendable, CustomStringConvertible {
    public let seq: Int
    public let message: String
    public var description: String { "replay failed at seq \(seq): \(message)" }
    public init(seq: Int, message: String) { self.seq = seq; self.message = message }
}

extension Event {
    /// The tab whose own state (stack, scroll, values, info) the event changes or
    /// concerns; nil for events of the bar (order, selection) and of presence.
    /// `scrollToTop` is both: the scroll-to-top counter, and its tab's scroll.
    public var tabScope: TabID? {
        switch self {
        case let .firstAppear(t, _), let .appear(t, _), let .disappear(t, _), let .pushed(t, _, _),
             let .popped(t, _), let .scrolled(t, _), let .valueSet(t, _, _), let .scrollToTop(t, _):
            return t
        case let .tabUpdated(tab):
            return tab.id
        case .selected, .tabAdded, .tabMoved, .tabRemoved, .clientJoined, .clientLeft,
             .presenceCounted, .clientCount, .presenceListed, .clientIdsReserved:
            return nil
        }
    }
}
