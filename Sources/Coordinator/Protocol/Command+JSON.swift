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
            json = try JSONParser.parseCommand(bytes, keep: Self.fields, nested: ["tab": Self.tabFields], valueLimit: Limits.maxValueBytes)
        } catch {
            throw RejectedFrame(ref: nil, error: .init(.badJSON, "not JSON: \(error)"))
        }
        return try parse(json)
    }

    /// Every field a command reads, and those of its `tab` object: the rest of a frame
    /// is checked but never built.
    static let fields: Set<String> = ["type", "ref", "tab", "route", "offset", "key", "value", "index", "after", "limit"]
    static let tabFields: Set<String> = ["id", "title", "icon", "color", "badge"]

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

    /// The frame a client sends for this command.
    public var json: JSONValue {
        var members = command.jsonMembers
        if let ref { members.insert(("ref", .string(ref)), at: 1) }
        return .object(members)
    }
}

extension Command {
    /// Reads the command's fields, checking only presence and types (`bad_command`);
    /// limits and tab existence are the coordinator's checks.
    static func parse(_ json: JSONValue) throws(CommandError) -> Command {
        let f = Fields(json)
        guard let type = json["type"]?.stringValue else { throw .badCommand("missing string field 'type'") }
        switch type {
        case "select": return .select(tab: try f.string("tab"))
        case "tap": return .tap(tab: try f.string("tab"))
        case "push": return .push(tab: try f.optionalString("tab"), route: try f.string("route"))
        case "pop": return .pop(tab: try f.optionalString("tab"))
        case "popToRoot": return .popToRoot(tab: try f.optionalString("tab"))
        case "scroll": return .scroll(tab: try f.optionalString("tab"), offset: try f.number("offset"))
        case "set":
            guard let value = json["value"] else { throw .badCommand("missing field 'value'") }
            return .set(tab: try f.optionalString("tab"), key: try f.string("key"), value: value)
        case "addTab":
            let t = Fields(try f.object("tab"), prefix: "tab.")
            let badge = try t.optionalString("badge")
            let info = TabInfo(id: try t.string("id"), title: try t.string("title"), icon: try t.string("icon"),
                               color: try t.string("color"), badge: badge)
            return .addTab(info, index: try f.optionalInt("index"))
        case "updateTab":
            let t = Fields(try f.object("tab"), prefix: "tab.")
            var update = TabUpdate(id: try t.string("id"))
            update.title = try t.optionalString("title")
            update.icon = try t.optionalString("icon")
            update.color = try t.optionalString("color")
            switch t.json["badge"] {
            case nil: update.badge = nil
            case .null?: update.badge = .some(nil)
            case let .string(s)?: update.badge = .some(s)
            default: throw .badCommand("'tab.badge' must be a string or null")
            }
            return .updateTab(update)
        case "moveTab": return .moveTab(tab: try f.string("tab"), index: try f.int("index"))
        case "removeTab": return .removeTab(tab: try f.string("tab"))
        case "sync": return .sync
        case "ping": return .ping
        case "clients": return .clients(after: try f.optionalString("after"), limit: try f.optionalInt("limit"))
        default: throw .badCommand("unknown command type '\(type.prefix(40))'")
        }
    }

    /// The command's fields as a client frame writes them (`type` first).
    var jsonMembers: [(String, JSONValue)] {
        var m: [(String, JSONValue)] = [("type", .string(type))]
        func opt(_ key: String, _ v: String?) { if let v { m.append((key, .string(v))) } }
        switch self {
        case let .select(tab), let .tap(tab), let .removeTab(tab): m.append(("tab", .string(tab)))
        case let .push(tab, route): opt("tab", tab); m.append(("route", .string(route)))
        case let .pop(tab), let .popToRoot(tab): opt("tab", tab)
        case let .scroll(tab, offset): opt("tab", tab); m.append(("offset", .double(offset)))
        case let .set(tab, key, value): opt("tab", tab); m.append(("key", .string(key))); m.append(("value", value))
        case let .addTab(info, index):
            var t: [(String, JSONValue)] = [("id", .string(info.id)), ("title", .string(info.title)),
                                            ("icon", .string(info.icon)), ("color", .string(info.color))]
            if let badge = info.badge { t.append(("badge", .string(badge))) }
            m.append(("tab", .object(t)))
            if let index { m.append(("index", .int(index))) }
        case let .updateTab(u):
            var t: [(String, JSONValue)] = [("id", .string(u.id))]
            if let v = u.title { t.append(("title", .string(v))) }
            if let v = u.icon { t.append(("icon", .string(v))) }
            if let v = u.color { t.append(("color", .string(v))) }
            if let v = u.badge { t.append(("badge", .string(v))) }
            m.append(("tab", .object(t)))
        case let .moveTab(tab, index): m.append(("tab", .string(tab))); m.append(("index", .int(index)))
        case .sync, .ping: break
        case let .clients(after, limit):
            opt("after", after)
            if let limit { m.append(("limit", .int(limit))) }
        }
        return m
    }
}

/// Typed access to a JSON object's fields; `null` counts as absent for optional ones.
private struct Fields {
    let json: JSONValue
    let prefix: String
    init(_ json: JSONValue, prefix: String = "") { self.json = json; self.prefix = prefix }

    func string(_ key: String) throws(CommandError) -> String {
        guard let v = json[key], !v.isNull else { throw .badCommand("missing field '\(prefix)\(key)'") }
        guard let s = v.stringValue else { throw .badCommand("'\(prefix)\(key)' must be a string") }
        return s
    }

    func optionalString(_ key: String) throws(CommandError) -> String? {
        guard let v = json[key], !v.isNull else { return nil }
        guard let s = v.stringValue else { throw .badCommand("'\(prefix)\(key)' must be a string") }
        return s
    }

    func number(_ key: String) throws(CommandError) -> Double {
        guard let v = json[key], !v.isNull else { throw .badCommand("missing field '\(prefix)\(key)'") }
        guard let d = v.doubleValue else { throw .badCommand("'\(prefix)\(key)' must be a number") }
        return d
    }

    func int(_ key: String) throws(CommandError) -> Int {
        guard let v = json[key], !v.isNull else { throw .badCommand("missing field '\(prefix)\(key)'") }
        return try integer(v, key)
    }

    func optionalInt(_ key: String) throws(CommandError) -> Int? {
        guard let v = json[key], !v.isNull else { return nil }
        return try integer(v, key)
    }

    private func integer(_ v: JSONValue, _ key: String) throws(CommandError) -> Int {
        guard case .number = v else { throw .badCommand("'\(prefix)\(key)' must be an integer") }
        guard let i = v.intValue else {
            // A huge integer literal is a number out of range, not a wrong type.
            if let d = v.doubleValue, d == d.rounded() { return d < 0 ? Int.min : Int.max }
            throw .badCommand("'\(prefix)\(key)' must be an integer")
        }
        return i
    }

    func object(_ key: String) throws(CommandError) -> JSONValue {
        guard let v = json[key], !v.isNull else { throw .badCommand("missing field '\(prefix)\(key)'") }
        guard case .object = v else { throw .badCommand("'\(prefix)\(key)' must be an object") }
        return v
    }
}
