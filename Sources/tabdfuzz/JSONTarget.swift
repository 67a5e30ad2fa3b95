import Coordinator

/// `JSONParser.parse` and `parseCommand` on any bytes: never a trap; what parses
/// serializes to compact text that parses to the same value and serializes to the same
/// text; the projecting parser accepts and refuses exactly what the full one does, with
/// the same error; the measured compact size is the real one.
enum JSONTarget {
    static func run(_ bytes: [UInt8]) {
        let full: Result<JSONValue, JSONParseError> = Result { () throws(JSONParseError) in try JSONParser.parse(bytes) }
        // The command parser, keeping two common fields, under a small and a large limit.
        for limit in [16, Limits.maxValueBytes] {
            let projected = Result { () throws(JSONParseError) in
                try JSONParser.parseCommand(bytes, keep: ["type", "value"], nested: ["tab": ["id"]], valueLimit: limit)
            }
            switch (full, projected) {
            case (.success, .success): break
            case let (.failure(a), .failure(b)):
                require(a == b, "parse and parseCommand disagree: '\(a)' vs '\(b)'")
            case let (.success, .failure(e)): require(false, "parseCommand refuses what parse accepts: \(e)")
            case let (.failure(e), .success): require(false, "parseCommand accepts what parse refuses: \(e)")
            }
        }
        guard case let .success(value) = full else { return }
        require(value.firstRepeatedKey == nil, "parse kept a repeated key")
        let text = value.compactBytes
        let again: JSONValue
        do { again = try JSONParser.parse(text) } catch { require(false, "compact form does not parse: \(error)"); return }
        require(again == value, "compact form parses to another value")
        require(again.compactBytes == text, "compact form is not stable")
        require(value.compactSize(limit: .max - 1) == text.count, "compactSize \(value.compactSize(limit: .max - 1)) != \(text.count)")
        let limit = bytes.count / 2
        let measured = value.compactSize(limit: limit)
        if text.count <= limit { require(measured == text.count, "compactSize under the limit") } else { require(measured > limit, "compactSize over the limit") }
        // Numbers keep their literal; an integer literal reads back as itself.
        if case let .number(n) = value, let i = Int(n) { require(value.intValue == i, "intValue of \(n)") }
    }
}
