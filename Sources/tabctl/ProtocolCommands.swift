import ArgumentParsing
import TabdClient

/// A field of a protocol command as tabctl's arguments give it (``Subcommand/init(kind:)``):
/// a positional argument, or an option `--name VALUE`.
struct CommandLineField {
    let field: CommandField
    /// The object the field belongs to (`tab` for a new tab's title), nil at the top level.
    let parent: String?
    let isPositional: Bool

    /// Every field of the kind, objects' members in their place: the required ones (and an
    /// object's first member, its id) positional, the rest options.
    static func all(of kind: CommandKind) -> [CommandLineField] {
        kind.declaration.fields.flatMap { field -> [CommandLineField] in
            guard case let .object(members) = field.value else {
                return [.init(field: field, parent: nil, isPositional: field.isRequired)]
            }
            return members.enumerated().map { i, m in .init(field: m, parent: field.name, isPositional: i == 0) }
        }
    }

    var placeholder: String { field.name.uppercased() }
    var option: String { "--" + field.name }
    /// `--no-badge`: sends null (for a field whose null is a value).
    var noFlag: String? { field.presence == .optionalOrNull ? "--no-" + field.name : nil }
    /// `--title TITLE`, `[--index INDEX]`, `[--badge BADGE | --no-badge]`.
    var usage: String {
        let given = noFlag.map { "\(synopsis) | \($0)" } ?? synopsis
        return field.isRequired ? given : "[\(given)]"
    }
    var synopsis: String { "\(option) \(placeholder)" }
}

extension Invocation {
    /// The protocol command of the invocation, from its arguments and the kind's declaration;
    /// tabd's own parser has the last word on the frame (its `bad_command` is a usage error).
    func protocolCommand(_ kind: CommandKind) throws(UsageError) -> Command {
        let fields = CommandLineField.all(of: kind)
        let missing = fields.filter { !$0.isPositional && $0.field.isRequired && options[$0.option] == nil }.map(\.option)
        if !missing.isEmpty {
            let list = missing.count == 1 ? missing[0] : missing.dropLast().joined(separator: ", ") + " and " + missing.last!
            throw UsageError("\(kind.commandLineName) needs \(list)")
        }
        var top: [(String, JSONValue)] = []
        var objects: [String: [(String, JSONValue)]] = [:]
        var arguments = positional.makeIterator()
        for f in fields {
            var value: JSONValue?
            if f.isPositional {
                value = try Self.value(arguments.next()!, of: f.field, named: f.placeholder)
            } else if let text = options[f.option] {
                value = try Self.value(text, of: f.field, named: f.option)
            }
            if let no = f.noFlag, flags.contains(no) {
                guard value == nil else { throw UsageError("\(f.option) and \(no) exclude each other") }
                value = .null
            }
            guard let value else { continue }
            if let parent = f.parent { objects[parent, default: []].append((f.field.name, value)) } else { top.append((f.field.name, value)) }
        }
        for (name, members) in objects { top.append((name, .object(members))) }
        do {
            return try CommandEnvelope.parse(.object([("type", .string(kind.rawValue))] + top)).command
        } catch {
            throw UsageError(error.error.message)
        }
    }

    /// The argument as the field's JSON value.
    static func value(_ text: String, of field: CommandField, named name: String) throws(UsageError) -> JSONValue {
        switch field.value {
        case .string, .object: return .string(text)
        case .number:
            guard let d = Double(text), d.isFinite else { throw UsageError("\(name) must be a number, got '\(text)'") }
            return .double(d)
        case .integer:
            guard let i = Int(text) else { throw UsageError("\(name) must be a whole number, got '\(text)'") }
            return .int(i)
        case .json:
            // Anything that is not JSON is taken as a string (`set title Hello`).
            return (try? JSONParser.parse(Array(text.utf8))) ?? .string(text)
        }
    }
}
