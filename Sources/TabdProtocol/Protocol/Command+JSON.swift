/// What the protocol says of one command kind (``CommandKind/declaration``).
public struct CommandDeclaration: Sendable {
    /// The fields, in the order a frame writes them and a parse checks them.
    public let fields: [CommandField]
    /// False for the queries (`sync`, `ping`, `clients`): answered from the state, never a
    /// change of it, and the only kinds a view token may send.
    public let changesState: Bool
    /// What the command does, in a few words (tabctl's help).
    public let summary: String

    init(_ fields: [CommandField], changesState: Bool = true, _ summary: String) {
        self.fields = fields; self.changesState = changesState; self.summary = summary
    }
}

/// One field of a command frame.
public struct CommandField: Sendable {
    public enum Value: Sendable {
        case string
        case number
        /// A number that is a whole number (a huge one is kept as out of range, not refused as a type).
        case integer
        /// Any JSON value.
        case json
        /// An object of these fields (a tab's description, or the changes to one).
        case object([CommandField])
    }

    public enum Presence: Sendable {
        /// Present and not null.
        case required
        /// Present; null is a value (`set`'s `value`: it removes the key).
        case requiredOrNull
        /// Absent or null both mean "not given".
        case optional
        /// Absent means "not given", null is a value (a tab's `badge`: null clears it).
        case optionalOrNull
    }

    public let name: String
    public let value: Value
    public let presence: Presence
    /// What it holds, in a few words (tabctl's help).
    public let help: String

    init(_ name: String, _ value: Value, _ presence: Presence, _ help: String) {
        self.name = name; self.value = value; self.presence = presence; self.help = help
    }

    public var isRequired: Bool { presence == .required || presence == .requiredOrNull }
}

extension Command {
    /// The wire name (`type`).
    public var type: String { kind.rawValue }

    /// `sync`, `ping` and `clients`: answered from the state, never a change of it.
    public var isQuery: Bool { !kind.declaration.changesState }

    /// Every wire name, for metrics and documentation.
    public static let allTypes = CommandKind.allCases.map(\.rawValue)
}

/// A command with the `ref` the client gave it.
public struct CommandEnvelope: Sendable, Equatable {
    public var ref: String?
    public var command: Command
    public init(ref: String?, command: Command) { self.ref = ref; self.command = command }
}

/// A frame that was refused before any command ran, with the `ref` to answer with
/// (null when the frame had none, or one that was not a string of at most 64 characters).
public struct RejectedFrame: Error, Sendable, Equatable {
    public var ref: String?
    public var error: CommandError
}

extension CommandEnvelope {
    /// Parses one client frame. Faults are reported by PROTOCOL.md's precedence:
    /// `bad_json`, then `bad_command`, then (from the coordinator) `unknown_tab`,
    /// then `invalid`. A `ref` over 64 characters is an `invalid` fault that only
    /// wins when nothing else is wrong; it is answered with `ref: null`.
    public static func parse(_ bytes: [UInt8]) throws(RejectedFrame) -> CommandEnvelope {
        let json: JSONValue
        do {
            json = try JSONParser.parseCommand(bytes, keep: Self.fields, nested: Self.nestedFields, valueLimit: Limits.maxValueBytes)
        } catch {
            throw RejectedFrame(ref: nil, error: .init(.badJSON, "not JSON: \(error)"))
        }
        return try parse(json)
    }

    /// Every field some kind declares, and those of its objects: the rest of a frame is
    /// checked but never built.
    static let fields = Set<String>(["type", "ref"]).union(CommandKind.allCases.flatMap { $0.declaration.fields.map(\.name) })
    static let nestedFields: [String: Set<String>] = CommandKind.allCases.flatMap(\.declaration.fields).reduce(into: [:]) { nested, field in
        if case let .object(members) = field.value { nested[field.name, default: []].formUnion(members.map(\.name)) }
    }

    public static func parse(_ json: JSONValue) throws(RejectedFrame) -> CommandEnvelope {
        guard case .object = json else {
            throw RejectedFrame(ref: nil, error: .init(.badJSON, "a frame must be a JSON object"))
        }
        var ref: String?
        var refTooLong = false
        switch json["ref"] {
        case nil, .null?: ref = nil
        case let .string(s)?:
            if s.unicodeScalars.count > Limits.maxRefLength { refTooLong = true } else { ref = s }
        default:
            throw RejectedFrame(ref: nil, error: .badCommand("'ref' must be a string"))
        }
        let command: Command
        do { command = try Command.parse(json) } catch { throw RejectedFrame(ref: ref, error: error) }
        if refTooLong {
            throw RejectedFrame(ref: nil, error: .invalid("'ref' is longer than \(Limits.maxRefLength) characters"))
        }
        return CommandEnvelope(ref: ref, command: command)
    }

    /// The frame a client sends for this command: `type`, `ref`, then the fields in their
    /// declared order.
    public var json: JSONValue {
        var members: [(String, JSONValue)] = [("type", .string(command.type))]
        if let ref { members.append(("ref", .string(ref))) }
        members += CommandFields.members(of: command.kind.declaration.fields, command.fieldValues)
        return .object(members)
    }
}

extension Command {
    /// Reads a frame's command: its kind, then each declared field's presence and type
    /// (`bad_command`), in the declared order; limits and tab existence are the
    /// coordinator's checks.
    static func parse(_ json: JSONValue) throws(CommandError) -> Command {
        guard let type = json["type"]?.stringValue else { throw .badCommand("missing string field 'type'") }
        guard let kind = CommandKind(rawValue: type) else { throw .badCommand("unknown command type '\(type.prefix(40))'") }
        return try Command(kind, try CommandFields(json, kind.declaration.fields))
    }
}

/// A command frame's fields, checked against their declaration when made. The accessors
/// read what the typed case needs; a field the declaration lets be absent, or of another
/// type, that the case reads as present is a `bad_command`, never a trap: peer input cannot
/// stop the daemon even where a declaration and its case disagree (`CommandDeclarationTests`
/// holds them together, through ``reads``).
struct CommandFields {
    private let json: JSONValue
    /// When set, every read is written down: (path, accessor) — what a kind's case reads.
    private let reads: Reads?
    /// The path of an object field's members (`tab.`), for errors and reads.
    private var prefix = ""

    /// The reads of a command's case, for the tests of its declaration.
    final class Reads: @unchecked Sendable {
        var list: [(path: String, accessor: String)] = []
    }

    init(_ json: JSONValue, _ declared: [CommandField], prefix: String = "") throws(CommandError) {
        for field in declared {
            let path = prefix + field.name
            let nullIsValue = field.presence == .requiredOrNull || field.presence == .optionalOrNull
            guard let v = json[field.name], nullIsValue || !v.isNull else {
                if field.isRequired { throw .badCommand("missing field '\(path)'") }
                continue
            }
            if v.isNull { continue }
            switch field.value {
            case .string:
                guard v.stringValue != nil else {
                    throw .badCommand("'\(path)' must be a string\(nullIsValue ? " or null" : "")")
                }
            case .number:
                guard v.doubleValue != nil else { throw .badCommand("'\(path)' must be a number") }
            case .integer:
                _ = try Self.integer(v, path)
            case .json:
                break
            case let .object(members):
                guard case .object = v else { throw .badCommand("'\(path)' must be an object") }
                _ = try CommandFields(v, members, prefix: path + ".")
            }
        }
        self.json = json
        reads = nil
    }

    private init(checked json: JSONValue, reads: Reads?) { self.json = json; self.reads = reads }

    /// A frame's fields read without checking them first, each read written down in `reads`.
    init(unchecked json: JSONValue, reads: Reads) { self.json = json; self.reads = reads }

    private static func integer(_ v: JSONValue, _ path: String) throws(CommandError) -> Int {
        guard case .number = v else { throw .badCommand("'\(path)' must be an integer") }
        guard let i = v.intValue else {
            // A huge integer literal is a number out of range, not a wrong type.
            if let d = v.doubleValue, d == d.rounded() { return d < 0 ? Int.min : Int.max }
            throw .badCommand("'\(path)' must be an integer")
        }
        return i
    }

    private func present(_ key: String) -> JSONValue? {
        guard let v = json[key], !v.isNull else { return nil }
        return v
    }

    private func read(_ key: String, _ accessor: String) { reads?.list.append((prefix + key, accessor)) }

    private func missing(_ key: String) -> CommandError { .badCommand("missing field '\(prefix + key)'") }

    func string(_ key: String) throws(CommandError) -> String {
        read(key, "string")
        guard let v = present(key) else { throw missing(key) }
        guard let s = v.stringValue else { throw .badCommand("'\(prefix + key)' must be a string") }
        return s
    }
    func optionalString(_ key: String) throws(CommandError) -> String? {
        read(key, "optionalString")
        guard let v = present(key) else { return nil }
        guard let s = v.stringValue else { throw .badCommand("'\(prefix + key)' must be a string") }
        return s
    }
    /// nil: absent; `.some(nil)`: null; `.some(text)`: a string.
    func nullableString(_ key: String) throws(CommandError) -> String?? {
        read(key, "nullableString")
        guard let v = json[key] else { return nil }
        if v.isNull { return .some(nil) }
        guard let s = v.stringValue else { throw .badCommand("'\(prefix + key)' must be a string or null") }
        return s
    }
    func number(_ key: String) throws(CommandError) -> Double {
        read(key, "number")
        guard let v = present(key) else { throw missing(key) }
        guard let d = v.doubleValue else { throw .badCommand("'\(prefix + key)' must be a number") }
        return d
    }
    func int(_ key: String) throws(CommandError) -> Int {
        read(key, "int")
        guard let v = present(key) else { throw missing(key) }
        return try Self.integer(v, prefix + key)
    }
    func optionalInt(_ key: String) throws(CommandError) -> Int? {
        read(key, "optionalInt")
        guard let v = present(key) else { return nil }
        return try Self.integer(v, prefix + key)
    }
    func value(_ key: String) throws(CommandError) -> JSONValue {
        read(key, "value")
        guard let v = json[key] else { throw missing(key) }
        return v
    }
    func object(_ key: String) throws(CommandError) -> CommandFields {
        read(key, "object")
        guard let v = present(key) else { throw missing(key) }
        guard case .object = v else { throw .badCommand("'\(prefix + key)' must be an object") }
        var fields = CommandFields(checked: v, reads: reads)
        fields.prefix = prefix + key + "."
        return fields
    }

    /// `values` as members in the declared order; nil values are left out.
    static func members(of declared: [CommandField], _ values: [String: JSONValue?]) -> [(String, JSONValue)] {
        declared.compactMap { field in values[field.name].flatMap { $0 }.map { (field.name, $0) } }
    }

    /// The members of the object field `name` of `kind`, in its declared order.
    static func members(of name: String, in kind: CommandKind, _ values: [String: JSONValue?]) -> [(String, JSONValue)] {
        guard let field = kind.declaration.fields.first(where: { $0.name == name }), case let .object(declared) = field.value else {
            preconditionFailure("\(kind) declares no object field \(name)")
        }
        return members(of: declared, values)
    }
}
