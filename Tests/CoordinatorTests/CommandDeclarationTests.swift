import Conformance
import Testing
@testable import Coordinator
@testable import TabdProtocol

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

    /// A kind's typed case reads exactly its declared fields, each with the accessor its
    /// declaration implies (a required string with `string`, an optional one with
    /// `optionalString`, a badge that null clears with `nullableString`, …). So the
    /// declaration that checks a frame and the case that builds the command cannot drift
    /// apart: a case that read an optional field as required would refuse (never trap on)
    /// a frame the declaration lets through, and this fails first.
    @Test func everyKindsCaseReadsItsDeclaredFieldsAsDeclared() throws {
        func sample(_ value: CommandField.Value) -> JSONValue {
            switch value {
            case .string: .string("s")
            case .number: .double(1.5)
            case .integer: .int(1)
            case .json: .int(7)
            case let .object(members): .object(members.map { ($0.name, sample($0.value)) })
            }
        }
        func expected(_ fields: [CommandField], prefix: String = "") -> [String: String] {
            var out: [String: String] = [:]
            for field in fields {
                let path = prefix + field.name
                switch (field.value, field.presence) {
                case (.string, .required): out[path] = "string"
                case (.string, .optional): out[path] = "optionalString"
                case (.string, .optionalOrNull): out[path] = "nullableString"
                case (.number, .required): out[path] = "number"
                case (.integer, .required): out[path] = "int"
                case (.integer, .optional): out[path] = "optionalInt"
                case (.json, .requiredOrNull): out[path] = "value"
                case let (.object(members), .required):
                    out[path] = "object"
                    out.merge(expected(members, prefix: path + "."), uniquingKeysWith: { a, _ in a })
                default: out[path] = "no accessor for \(field.value) \(field.presence)"
                }
            }
            return out
        }
        for kind in CommandKind.allCases {
            let frame = JSONValue.object(kind.declaration.fields.map { ($0.name, sample($0.value)) })
            let reads = CommandFields.Reads()
            _ = try Command(kind, CommandFields(unchecked: frame, reads: reads))
            let read = Dictionary(reads.list.map { ($0.path, $0.accessor) }, uniquingKeysWith: { a, b in a == b ? a : "\(a) and \(b)" })
            #expect(read == expected(kind.declaration.fields), "\(kind)")
            // Only the required fields: the case builds the command (optional ones read as absent).
            let bare = JSONValue.object(kind.declaration.fields.filter(\.isRequired).map { field in
                guard case let .object(members) = field.value else { return (field.name, sample(field.value)) }
                return (field.name, .object(members.filter(\.isRequired).map { ($0.name, sample($0.value)) }))
            })
            #expect(throws: Never.self, "\(kind) with its required fields only") { _ = try Command.parse(bare.merging(type: kind.rawValue)) }
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

private extension JSONValue {
    /// This object with `type` first.
    func merging(type: String) -> JSONValue {
        guard case let .object(members) = self else { return self }
        return .object([("type", .string(type))] + members)
    }
}
