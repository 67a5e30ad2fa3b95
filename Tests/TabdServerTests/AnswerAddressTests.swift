import Testing
import WebSockets
@testable import TabdServer

/// An answer's address survives the coordinator's number: each kind comes back as itself,
/// and no kind is read as another.
@Suite struct AnswerAddressTests {
    @Test func everyKindComesBackAsItself() {
        let addresses: [AnswerAddress] = [.connection(ConnectionID(rawValue: 1)), .connection(ConnectionID(rawValue: (1 << 62) - 1)),
                                          .apiCall(1), .apiCall(42), .peer(1), .peer(42), .peer((1 << 62) - 1)]
        for address in addresses { #expect(AnswerAddress(rawValue: address.rawValue) == address) }
        #expect(Set(addresses.map(\.rawValue)).count == addresses.count, "two addresses share a number")
        #expect(AnswerAddress.apiCall(7).rawValue != AnswerAddress.peer(7).rawValue)
        #expect(AnswerAddress.peer(7).rawValue != AnswerAddress.connection(ConnectionID(rawValue: 7)).rawValue)
    }
}
