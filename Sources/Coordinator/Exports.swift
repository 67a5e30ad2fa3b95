// The wire's values (commands, events, snapshots, JSON, the fold) are the TabdProtocol
// module's, which clients import without the server's actors; the server's modules see
// them through this one.
@_exported import TabdProtocol

extension ScrollCounter {
    /// The scroll-to-top counter after `event` (``ScrollToTopRule/apply(_:to:)``).
    public static func apply(_ event: Event, to value: inout Int) throws(FoldError) {
        try ScrollToTopRule.apply(event, to: &value)
    }
}
