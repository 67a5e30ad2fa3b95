#if canImport(Glibc)
import Glibc
#endif

// What tabd's modules would otherwise take from Foundation, whose ICU data weighs tens of
// megabytes in an executable: they import FoundationEssentials (Date, Data, URL, JSON
// coding) and these few functions, which know nothing of locales.

extension StringProtocol {
    /// Without white space (spaces, tabs, line feeds, carriage returns, and any other
    /// Unicode white space) at either end.
    public var trimmingWhitespace: String {
        let scalars = String(self).unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }) else { return "" }
        let last = scalars.lastIndex(where: { !$0.properties.isWhitespace })!
        return String(String.UnicodeScalarView(scalars[first...last]))
    }

    /// Padded with spaces on the right to `width` characters (never cut).
    public func padded(to width: Int) -> String {
        count >= width ? String(self) : String(self) + String(repeating: " ", count: width - count)
    }
}

/// Lowercase hexadecimal.
public enum Hex {
    /// Two digits per byte: `[0x0f, 0xa0]` is `0fa0`.
    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// A number with a fixed count of decimals (`1.5` with 1: `1.5`; `2.25` with 0: `2`), as
/// `%.Nf` writes it, without a locale.
public func fixedDecimals(_ value: Double, _ decimals: Int) -> String {
    guard value.isFinite else { return "\(value)" }
    var scale = 1.0
    for _ in 0..<decimals { scale *= 10 }
    let scaled = (abs(value) * scale).rounded(.toNearestOrEven)
    let whole = Int(scaled / scale)
    var text = (value < 0 && scaled != 0 ? "-" : "") + String(whole)
    if decimals > 0 {
        let fraction = Int(scaled) - whole * Int(scale)
        let digits = String(fraction)
        text += "." + String(repeating: "0", count: decimals - digits.count) + digits
    }
    return text
}

/// The standard streams, written as bytes (one write each: lines of several threads do not
/// mix within a call).
public enum StandardStream {
    public static func error(_ text: String) { write(2, text) }
    public static func output(_ text: String) { write(1, text) }

    private static func write(_ fd: Int32, _ text: String) {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 { if errno == EINTR { continue } else { return } }
            offset += n
        }
    }
}

/// The directory part of a path (`/var/lib/tabd/state.sqlite` → `/var/lib/tabd`;
/// `state.sqlite` → ``; `/x` → `/`), as `NSString.deletingLastPathComponent` gives it.
public func directoryPart(of path: String) -> String {
    var p = Substring(path)
    while p.count > 1, p.hasSuffix("/") { p = p.dropLast() }
    guard let slash = p.lastIndex(of: "/") else { return "" }
    if slash == p.startIndex { return "/" }
    var dir = p[..<slash]
    while dir.count > 1, dir.hasSuffix("/") { dir = dir.dropLast() }
    return String(dir)
}
