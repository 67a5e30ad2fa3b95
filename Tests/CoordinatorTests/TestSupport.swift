import Testing
@testable import Coordinator
@testable import TabdProtocol
@_exported import Conformance

/// A coordinator with seed 001's tabs; after its first batch (seq 1–2) home's root p1
/// is visible. favorites' root is p2, profile's p3; the next page is p4.
func freshCoordinator(_ tabs: [TabInfo] = TabInfo.defaults) throws -> Coordinator {
    try Coordinator(tabs: tabs)
}

/// Runs a command that must succeed and returns its batch.
@discardableResult
func run(_ c: Coordinator, _ command: Command, by client: ClientID = "c1", ref: String? = "r") async throws -> EventBatch? {
    guard case let .applied(_, batch) = try await c.execute(command, by: client, ref: ref) else {
        Issue.record("\(command.type) did not apply")
        return nil
    }
    return batch
}

/// The events a batch should hold, with seqs from `first` on.
func sequenced(from first: Int, _ events: [Event]) -> [SequencedEvent] {
    events.enumerated().map { SequencedEvent(seq: first + $0.offset, event: $0.element) }
}

/// Expects a refused command with `code`, and the state untouched.
func expectRefused(_ c: Coordinator, _ command: Command, _ code: ErrorCode, sourceLocation: SourceLocation = #_sourceLocation) async {
    let before = await c.snapshot()
    do {
        _ = try await c.execute(command, by: "c1", ref: "bad")
        Issue.record("\(command) was accepted, expected \(code.rawValue)", sourceLocation: sourceLocation)
    } catch {
        #expect(error.code == code, "\(error.message)", sourceLocation: sourceLocation)
    }
    let after = await c.snapshot()
    #expect(after == before, "a refused command changed the state", sourceLocation: sourceLocation)
}


import Foundation

extension String {
    func write(toFile path: String) throws {
        try Data(utf8).write(to: URL(fileURLWithPath: path))
    }
}
