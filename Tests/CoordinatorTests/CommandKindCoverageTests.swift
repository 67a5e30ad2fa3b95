import Coordinator
import Foundation
import Testing

/// Every command kind (``Command/allTypes``) is everywhere a user meets commands: the JSON
/// Schema, the protocol's command table, the JavaScript client and its types (with the
/// kinds answered by an ack as a union), the Swift client, and tabctl's documentation. A kind
/// added to the table alone fails here (and does not compile until `Command` has its case).
@Suite struct CommandKindCoverageTests {
    /// The repository, found from this file.
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func text(_ path: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
    }

    /// The kinds that are queries: those a bare `{"type":…}` parses to a query.
    static let queries = Set(Command.allTypes.filter { type in
        (try? CommandEnvelope.parse(Array("{\"type\":\"\(type)\"}".utf8)))?.command.isQuery == true
    })

    @Test func theQueriesAreTheThreeThatReadTheState() {
        #expect(Self.queries == ["sync", "ping", "clients"])
        #expect(Set(Command.allTypes).count == Command.allTypes.count, "a kind named twice")
    }

    @Test func everyKindIsInTheSchemaAndTheProtocolsTable() throws {
        let schema = try Self.text("docs/schema/commands.json")
        let protocolDoc = try Self.text("docs/PROTOCOL.md")
        for type in Command.allTypes {
            #expect(schema.contains("\"const\": \"\(type)\""), "docs/schema/commands.json has no \(type)")
            #expect(protocolDoc.contains("| `\(type)` |"), "PROTOCOL.md's command table has no \(type)")
        }
    }

    @Test func everyKindHasItsMethodInBothClientsAndItsTabctlCommand() throws {
        let js = try Self.text("web/tabd.js")
        let types = try Self.text("web/tabd.d.ts")
        let swift = try Self.text("Sources/TabdClient/TabdClient+Commands.swift")
        // tabctl makes its commands from the kinds' declarations; its documentation lists them.
        let tabctl = try Self.text("docs/CLIENTS.md")
        for type in Command.allTypes {
            #expect(js.contains("\n  \(type)("), "tabd.js has no \(type)()")
            #expect(types.contains("\n  \(type)("), "tabd.d.ts has no \(type)()")
            #expect(swift.contains("public func \(type)("), "TabdClient has no \(type)()")
            // `sync` is tabctl's `state`: the snapshot, printed.
            let command = type == "sync" ? "state" : CommandKind(rawValue: type)!.commandLineName
            #expect(tabctl.contains("`\(command)"), "docs/CLIENTS.md's tabctl table has no \(command)")
        }
        // The kinds answered with an ack, as tabd.d.ts types them.
        let union = try #require(types.components(separatedBy: "export type AckCommand =").dropFirst().first?.components(separatedBy: ";").first)
        let acked = Set(union.matches(of: /"([A-Za-z]+)"/).map { String($0.output.1) })
        #expect(acked == Set(Command.allTypes).subtracting(Self.queries), "AckCommand is \(acked.sorted())")
    }
}
