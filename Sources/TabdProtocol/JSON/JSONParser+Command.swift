extension JSONParser {
    /// Parses a client's frame as strictly as ``parse(_:)`` — every byte is checked,
    /// the same errors are thrown — but builds only what a command can read, so the cost
    /// of a frame is bounded by the fields' limits, not by its size or shape:
    /// - of the top-level object, only the members named in `keep`; of those named in
    ///   `nested` (such as `tab`), only their own members named there; every other member
    ///   is checked and skipped;
    /// - a member's array or object is built only until its compact form passes
    ///   `valueLimit` bytes (the rest is checked and skipped): such a value is over its
    ///   limit whatever follows, and what was built is enough to show it;
    /// - inside those values a repeated key is kept as it was sent, not resolved, so the
    ///   value's size is the size of what was sent and a check can refuse the repetition
    ///   (see ``JSONValue/firstRepeatedKey``).
    /// A top-level value that is not an object is built under the same limit.
    public static func parseCommand(_ bytes: [UInt8], keep: Set<String>, nested: [String: Set<String>] = [:],
                                    valueLimit: Int) throws(JSONParseError) -> JSONValue {
        var p = JSONParser(bytes)
        p.keepRepeatedKeys = true
        p.skipWhitespace()
        let value: JSONValue
        if p.i < p.input.count, p.input[p.i] == UInt8(ascii: "{") {
            value = try p.projectedObject(depth: 0, keep: keep, nested: nested, valueLimit: valueLimit)
        } else {
            var size = 0
            value = try p.value(depth: 0, budget: valueLimit, size: &size)
        }
        try p.end()
        return value
    }

    /// The object at `i` with only the members named in `keep`; a repeated member keeps
    /// its last value, as in ``parse(_:)``.
    private mutating func projectedObject(depth: Int, keep: Set<String>, nested: [String: Set<String>],
                                          valueLimit: Int) throws(JSONParseError) -> JSONValue {
        guard depth < Self.maxDepth else { throw fail("nesting deeper than \(Self.maxDepth)") }
        i += 1
        var members: [(String, JSONValue)] = []
        skipWhitespace()
        if i < input.count, input[i] == UInt8(ascii: "}") { i += 1; return .object(members) }
        while true {
            skipWhitespace()
            guard i < input.count, input[i] == UInt8(ascii: "\"") else { throw fail("expected a string key") }
            var size = 0
            let key = try string(size: &size)
            try colon()
            if keep.contains(key) {
                let item: JSONValue
                if let inner = nested[key], i < input.count, input[i] == UInt8(ascii: "{") {
                    item = try projectedObject(depth: depth + 1, keep: inner, nested: [:], valueLimit: valueLimit)
                } else {
                    size = 0
                    item = try value(depth: depth + 1, budget: valueLimit, size: &size)
                }
                members.removeAll { $0.0 == key }
                members.append((key, item))
            } else {
                try skipValue(depth: depth + 1)
            }
            skipWhitespace()
            guard i < input.count else { throw fail("unexpected end of input") }
            if input[i] == UInt8(ascii: ",") { i += 1; continue }
            if input[i] == UInt8(ascii: "}") { i += 1; return .object(members) }
            throw fail("expected ',' or '}'")
        }
    }
}

extension JSONValue {
    /// The first key an object repeats, at any depth (only a value from
    /// ``JSONParser/parseCommand(_:keep:nested:valueLimit:)`` can have one).
    public var firstRepeatedKey: String? {
        switch self {
        case .null, .bool, .number, .string: return nil
        case let .array(items):
            for item in items { if let k = item.firstRepeatedKey { return k } }
            return nil
        case let .object(members):
            var seen = Set<String>()
            for (key, item) in members {
                guard seen.insert(key).inserted else { return key }
                if let k = item.firstRepeatedKey { return k }
            }
            return nil
        }
    }
}
