/// A command line read one argument at a time, shared by `tabd`, `tabd token`, `tabctl`
/// and `tabbench`: each keeps its own options and help, and reads values, numbers and
/// errors the same way.
public struct Arguments: Sendable {
    public let all: [String]
    /// The index of the argument ``next()`` returned last.
    public private(set) var index = -1

    public init(_ all: [String]) { self.all = all }

    /// The next argument, nil past the last.
    public mutating func next() -> String? {
        guard index + 1 < all.count else {
            index = all.count
            return nil
        }
        index += 1
        return all[index]
    }

    /// Every argument after the current one (what follows `--`); nothing is left after it.
    public mutating func rest() -> [String] {
        defer { index = all.count }
        return index + 1 < all.count ? Array(all[(index + 1)...]) : []
    }

    /// The value of `option`: the next argument, or "OPTION needs a value".
    public mutating func value(of option: String) throws(UsageError) -> String {
        guard let value = next() else { throw UsageError("\(option) needs a value") }
        return value
    }

    /// The value of `option` as a whole number within `min`…`max`.
    public mutating func int(of option: String, min: Int, max: Int = .max) throws(UsageError) -> Int {
        try Self.int(try value(of: option), as: option, min: min, max: max)
    }

    /// The value of `option` as a number of at least `min`.
    public mutating func double(of option: String, min: Double) throws(UsageError) -> Double {
        try Self.double(try value(of: option), as: option, min: min)
    }

    /// `text` as a whole number within `min`…`max`; `name` (an option, or the variable it
    /// came from) is said in the error.
    public static func int(_ text: String, as name: String, min: Int, max: Int = .max) throws(UsageError) -> Int {
        guard let n = Int(text), n >= min, n <= max else {
            let range = max == .max ? "\(min) or more" : "from \(min) to \(max)"
            throw UsageError("\(name) must be a whole number \(range), got '\(text.prefix(80))'")
        }
        return n
    }

    /// `text` as a number of at least `min`.
    public static func double(_ text: String, as name: String, min: Double) throws(UsageError) -> Double {
        guard let d = Double(text), d.isFinite, d >= min else {
            throw UsageError("\(name) must be a number of at least \(min), got '\(text.prefix(80))'")
        }
        return d
    }
}

/// A command line that cannot be carried out: the message for stderr and the exit status
/// (2, unless it is help asked for: 0).
public struct UsageError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public let exitCode: Int32

    public init(_ message: String, exitCode: Int32 = 2) {
        self.message = message
        self.exitCode = exitCode
    }

    public var description: String { message }
}
