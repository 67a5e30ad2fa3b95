/// The joins and leaves gathered for one room before they are applied, as the service
/// thread gathers a pass's and the room a take's: a connection that leaves before its join
/// was applied never joins, so it does not leave either. Order is kept.
struct PresenceChanges: Sendable {
    private(set) var joins: [Gateway.Join] = []
    private(set) var leaves: [Gateway.Leave] = []

    var isEmpty: Bool { joins.isEmpty && leaves.isEmpty }

    mutating func join(_ join: Gateway.Join) { joins.append(join) }

    /// Records `leave`; false when its connection's join was still here (both are dropped:
    /// the connection never joined).
    @discardableResult
    mutating func leave(_ leave: Gateway.Leave) -> Bool {
        if let i = joins.firstIndex(where: { $0.connection == leave.connection }) {
            joins.remove(at: i)
            return false
        }
        leaves.append(leave)
        return true
    }
}
