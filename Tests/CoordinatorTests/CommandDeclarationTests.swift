import Conformance
import Testing
@testable import Coordinator

/// The command kind table (``CommandKind/declaration``) is what parsing, encoding and the
/// role rule read: a command encodes to the frame its declaration describes and parses back
/// to itself, every declared field is kept and checked, and nothing else decides a kind's
/// fields or whether it changes the room.
@Suite struct CommandDeclarationTests {
    @Test func everyKindRoundTripsThroughItsFrame() throws {
        var rng = SeededRandom(seed: 38)
        for kind in CommandKind.allCases {
            for _ in 0..<40 {
                let command = randomCommand(kind, &rng)
                #expect(command.kind == kind)
                let frame = CommandEnvelope(ref: "r", command: command).json
                #expect(try CommandEnvelope.parse(frame.compactBytes) == CommandEnvelope(ref: "r", command: command), "\(frame.compactString)")
                // The frame holds `type`, `ref` and declared fields only, in the declared order.
                guard case let .object(members) = frame else { Issue.record("not an object"); continue }
                let declared = ["type", "ref"] + kind.declaration.fields.map(\.name)
                let names = members.map(\.0)
                #expect(names == declared.filter(names.contains), "\(kind): \(names)")
            }
        }
    }

    @Test func aKindsCommandLineNameIsItsNameInKebabCase() {
        #expect(CommandKind.popToRoot.commandLineName == "pop-to-root")
        #expect(CommandKind.tap.commandLineName == "tap")
        #expect(Set(CommandKind.allCases.map(\.commandLineName)).count == CommandKind.allCases.count)
    }

    @Test func everyDeclaredFieldIsKeptByTheParser() {
        for field in CommandKind.allCases.flatMap(\.declaration.fields) {
            #expect(CommandEnvelope.fields.contains(field.name))
            if case let .object(members) = field.value {
                #expect(Set(members.map(\.name)).isSubset(of: CommandEnvelope.nestedFields[field.name] ?? []))
            }
        }
    }

    /// Each required field left out, and each field of the wrong type, is `bad_command`
    /// naming the field; the first declared field that is wrong is the one named.
    @Test func eachFieldIsCheckedAsDeclared() throws {
        var rng = SeededRandom(seed: 7)
        for kind in CommandKind.allCases {
            for field in kind.declaration.fields {
                // A frame that gives the field (`clients`' `after` the generator never gives: it is
                // set here, as a cursor).
                var frame = CommandEnvelope(ref: nil, command: randomCommand(kind, &rng)).json
                for _ in 0..<50 where frame[field.name] == nil { frame = CommandEnvelope(ref: nil, command: randomCommand(kind, &rng)).json }
                guard case var .object(members) = frame else { Issue.record("not an object"); continue }
                if frame[field.name] == nil { members.append((field.name, .string("c1"))) }
                let i = members.firstIndex { $0.0 == field.name }!
                let wrong: JSONValue = switch field.value {
                case .string, .object: .array([])
                case .number, .integer: .string("1")
                case .json: .null
                }
                if case .json = field.value {} else {
                    members[i].1 = wrong
                    #expect(throws: RejectedFrame.self) { try CommandEnvelope.parse(.object(members)) }
                    do { _ = try CommandEnvelope.parse(.object(members)) } catch {
                        #expect(error.error.code == .badCommand)
                        #expect(error.error.message.contains("'\(field.name)'"), "\(kind).\(field.name): \(error.error.message)")
                    }
                }
                if field.isRequired {
                    members.remove(at: i)
                    do {
                        _ = try CommandEnvelope.parse(.object(members))
                        Issue.record("\(kind) without \(field.name) parsed")
                    } catch {
                        #expect(error.error == .badCommand("missing field '\(field.name)'"))
                    }
                }
            }
        }
    }

    @Test func theQueriesAreTheKindsThatChangeNothingAndAViewMaySendOnlyThem() {
        for kind in CommandKind.allCases {
            var rng = SeededRandom(seed: 1)
            let command = randomCommand(kind, &rng)
            #expect(command.isQuery == !kind.declaration.changesState)
        }
        #expect(CommandKind.allCases.filter { !$0.declaration.changesState } == [.sync, .ping, .clients])
    }

    @Test func nullIsAValueOnlyWhereTheDeclarationSaysSo() throws {
        let cleared = try CommandEnvelope.parse(Array(#"{"type":"updateTab","tab":{"id":"home","badge":null}}"#.utf8))
        #expect(cleared.command == .updateTab(TabUpdate(id: "home", badge: .some(nil))))
        let removed = try CommandEnvelope.parse(Array(#"{"type":"set","key":"k","value":null}"#.utf8))
        #expect(removed.command == .set(tab: nil, key: "k", value: .null))
        // Elsewhere null is "not given".
        let selected = try CommandEnvelope.parse(Array(#"{"type":"pop","tab":null}"#.utf8))
        #expect(selected.command == .pop(tab: nil))
        #expect(throws: RejectedFrame.self) { try CommandEnvelope.parse(Array(#"{"type":"select","tab":null}"#.utf8)) }
    }
}
