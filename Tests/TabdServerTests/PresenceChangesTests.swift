import Auth
import Coordinator
import Testing
import WebSockets
@testable import TabdServer

/// The one rule of gathered joins and leaves, used by the service thread's pass and by a
/// room's take alike.
@Suite struct PresenceChangesTests {
    func join(_ n: UInt64) -> Gateway.Join {
        Gateway.Join(connection: ConnectionID(rawValue: n), request: .init(name: "c\(n)"), peer: "127.0.0.1", role: .control)
    }

    func leave(_ n: UInt64) -> Gateway.Leave { Gateway.Leave(connection: ConnectionID(rawValue: n), how: "code 1000") }

    @Test func aConnectionThatLeavesBeforeItsJoinIsAppliedNeitherJoinsNorLeaves() {
        var p = PresenceChanges()
        p.join(join(1))
        p.join(join(2))
        p.join(join(3))
        #expect(p.leave(leave(2)) == false, "its join was still here")
        #expect(p.leave(leave(9)) == true, "a connection that joined before: it leaves")
        #expect(p.joins.map(\.connection.rawValue) == [1, 3], "the other joins keep their order")
        #expect(p.leaves.map(\.connection.rawValue) == [9])
        #expect(!p.isEmpty)
        var empty = PresenceChanges()
        empty.join(join(4))
        empty.leave(leave(4))
        #expect(empty.isEmpty)
    }
}
