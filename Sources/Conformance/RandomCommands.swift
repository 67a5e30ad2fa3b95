import Coordinator

/// A small deterministic generator (SplitMix64), so a failing run can be repeated from its seed.
public struct SeededRandom: RandomNumberGenerator {
    private var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// The tab ids random commands name: some exist only some of the time.
public let randomTabPool: [TabID] = ["home", "favorites", "profile", "t0", "t1", "t2", "t3"]

/// A random command: any kind that changes the room with the same chance, a query now and
/// then (3 in 100). Its fields follow the kind's declaration (``CommandKind/declaration``),
/// so a new kind is generated as soon as it is declared.
public func randomCommand(_ rng: inout SeededRandom, tabs: [TabID] = randomTabPool) -> Command {
    let kind = Int.random(in: 0..<100, using: &rng) < 97 ? changingKinds.randomElement(using: &rng)! : queryKinds.randomElement(using: &rng)!
    return randomCommand(kind, &rng, tabs: tabs)
}

/// The kinds that change the room, and the queries: picked from for every random command.
private let changingKinds = CommandKind.allCases.filter(\.declaration.changesState)
private let queryKinds = CommandKind.allCases.filter { !$0.declaration.changesState }

/// A random command of `kind`: each optional field given half the time, values from small
/// pools so that commands meet (the same tabs, routes, keys and places).
public func randomCommand(_ kind: CommandKind, _ rng: inout SeededRandom, tabs: [TabID] = randomTabPool) -> Command {
    let frame = JSONValue.object([("type", .string(kind.rawValue))] + randomMembers(kind.declaration.fields, &rng, tabs: tabs))
    do {
        return try CommandEnvelope.parse(frame).command
    } catch {
        preconditionFailure("a random \(kind.rawValue) does not parse: \(error.error.message)")
    }
}

private func randomMembers(_ fields: [CommandField], _ rng: inout SeededRandom, tabs: [TabID]) -> [(String, JSONValue)] {
    var members: [(String, JSONValue)] = []
    for field in fields {
        switch field.presence {
        case .required, .requiredOrNull: break
        case .optional, .optionalOrNull: if Bool.random(using: &rng) { continue }
        }
        let orNull = field.presence == .requiredOrNull || field.presence == .optionalOrNull
        if orNull, Int.random(in: 0..<3, using: &rng) == 0 {
            members.append((field.name, .null))
            continue
        }
        guard let value = randomValue(field, &rng, tabs: tabs) else { continue }
        members.append((field.name, value))
    }
    return members
}

/// A value for the field, by what the field is (its name within its type); nil leaves an
/// optional field out (a `clients` cursor: it would name no client).
private func randomValue(_ field: CommandField, _ rng: inout SeededRandom, tabs: [TabID]) -> JSONValue? {
    let n = Int.random(in: 0..<9, using: &rng)
    switch (field.value, field.name) {
    case (.string, "tab"), (.string, "id"): return .string(tabs.randomElement(using: &rng)!)
    case (.string, "route"): return .string("r\(n)")
    case (.string, "key"): return .string("k\(n % 4)")
    case (.string, "title"): return .string("T\(n % 3)")
    case (.string, "icon"): return .string("star")
    case (.string, "color"): return .string("#336699")
    case (.string, "badge"): return .string("\(n + 1)")
    case (.string, "after"): return nil
    case (.string, _): return .string("s\(n)")
    case (.number, _): return .double(Double(Int.random(in: 0..<2000, using: &rng)) / 4)
    case (.integer, "index"): return .int(n % 5)
    case (.integer, _): return .int(n + 1)
    case (.json, _): return .int(Int.random(in: 0..<100, using: &rng))
    case let (.object(members), _): return .object(randomMembers(members, &rng, tabs: tabs))
    }
}
