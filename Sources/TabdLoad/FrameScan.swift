import Glibc

/// Reads what a load client needs from a server frame without parsing the JSON: its type,
/// the number in a `"ref":"r<number>"`, the first and last `seq`, and a digest of the bytes.
///
/// It relies on the shape tabd writes (compact JSON, `type` first, then `by`/`ref`, events as
/// `{"seq":N,...}`), which the benchmark's messages for the other servers copy. It is a fast
/// path for counting and matching; correctness checks parse frames with `ServerFrame(bytes:)`.
public enum FrameScan {
    public enum Kind: Sendable, Equatable {
        case welcome, events, ack, error, snapshot, pong, clients, other
    }

    private static let typePrefix = Array(#"{"type":""#.utf8)

    public static func kind(_ b: UnsafeRawBufferPointer) -> Kind {
        let p = typePrefix
        guard b.count > p.count + 2 else { return .other }
        for i in 0..<p.count where b[i] != p[i] { return .other }
        let c0 = b[p.count], c1 = b[p.count + 1]
        switch (c0, c1) {
        case (UInt8(ascii: "e"), UInt8(ascii: "v")): return .events
        case (UInt8(ascii: "a"), UInt8(ascii: "c")): return .ack
        case (UInt8(ascii: "e"), UInt8(ascii: "r")): return .error
        case (UInt8(ascii: "w"), UInt8(ascii: "e")): return .welcome
        case (UInt8(ascii: "s"), UInt8(ascii: "n")): return .snapshot
        case (UInt8(ascii: "p"), UInt8(ascii: "o")): return .pong
        case (UInt8(ascii: "c"), UInt8(ascii: "l")): return .clients
        default: return .other
        }
    }

    private static let refKey = Array(#""ref":""#.utf8)
    private static let seqKey = Array(#"{"seq":"#.utf8)

    /// The first position at or after `from` (before `limit`) where `needle` starts
    /// (candidates found with the C library's vectorised `memchr`, checked with `memcmp`).
    static func find(_ needle: [UInt8], in b: UnsafeRawBufferPointer, from: Int = 0, limit: Int? = nil) -> Int? {
        let end = min(limit ?? b.count, b.count)
        guard end - from >= needle.count, let base = b.baseAddress, let first = needle.first else { return nil }
        return needle.withUnsafeBytes { n -> Int? in
            var at = from
            let last = end - needle.count
            while at <= last {
                guard let hit = memchr(base + at, Int32(first), last - at + 1) else { return nil }
                let i = base.distance(to: UnsafeRawPointer(hit))
                if memcmp(hit, n.baseAddress!, n.count) == 0 { return i }
                at = i + 1
            }
            return nil
        }
    }

    /// The decimal number at `i`, and where it ends.
    static func number(_ b: UnsafeRawBufferPointer, at start: Int) -> (Int, end: Int)? {
        var i = start
        var n = 0
        while i < b.count, b[i] >= 48, b[i] <= 57 {
            n = n &* 10 &+ Int(b[i] &- 48)
            i += 1
        }
        return i > start ? (n, i) : nil
    }

    /// N in `"ref":"<prefix>N"` within the first `window` bytes (where `by` and `ref` sit).
    public static func refNumber(_ b: UnsafeRawBufferPointer, prefix: UInt8 = UInt8(ascii: "r"), window: Int = 160) -> Int? {
        guard let at = find(refKey, in: b, limit: window) else { return nil }
        let start = at + refKey.count
        guard start < b.count, b[start] == prefix else { return nil }
        guard let (n, end) = number(b, at: start + 1), end < b.count, b[end] == UInt8(ascii: "\"") else { return nil }
        return n
    }

    /// The seq of the first event.
    public static func firstSeq(_ b: UnsafeRawBufferPointer) -> Int? {
        guard let at = find(seqKey, in: b) else { return nil }
        return number(b, at: at + seqKey.count)?.0
    }

    /// The seq of the last event (the last `{"seq":`).
    public static func lastSeq(_ b: UnsafeRawBufferPointer) -> Int? {
        guard var at = find(seqKey, in: b) else { return nil }
        while let next = find(seqKey, in: b, from: at + seqKey.count) { at = next }
        return number(b, at: at + seqKey.count)?.0
    }

    /// The seqs of the first and the last event, in one pass.
    public static func seqRange(_ b: UnsafeRawBufferPointer) -> (first: Int, last: Int)? {
        guard let at = find(seqKey, in: b), let (first, end) = number(b, at: at + seqKey.count) else { return nil }
        var last = at
        while let next = find(seqKey, in: b, from: max(end, last + seqKey.count)) { last = next }
        return (first, last == at ? first : number(b, at: last + seqKey.count)?.0 ?? first)
    }

    /// A 64-bit digest of the bytes (word at a time; not cryptographic): equal streams have
    /// equal digests, and different frames collide with negligible probability.
    public static func digest(_ b: UnsafeRawBufferPointer, seed: UInt64 = 0x9E37_79B9_7F4A_7C15) -> UInt64 {
        var h = seed ^ UInt64(b.count) &* 0xFF51_AFD7_ED55_8CCD
        var i = 0
        while i + 8 <= b.count {
            let w = b.loadUnaligned(fromByteOffset: i, as: UInt64.self)
            h = (h ^ (w &* 0xC2B2_AE3D_27D4_EB4F)).rotateLeft(31) &* 0x9E37_79B9_7F4A_7C15
            i += 8
        }
        var tail: UInt64 = 0
        var shift: UInt64 = 0
        while i < b.count {
            tail |= UInt64(b[i]) << shift
            shift += 8
            i += 1
        }
        h = (h ^ (tail &* 0xC2B2_AE3D_27D4_EB4F)).rotateLeft(31) &* 0x9E37_79B9_7F4A_7C15
        h ^= h >> 33
        h = h &* 0xFF51_AFD7_ED55_8CCD
        h ^= h >> 33
        return h
    }

    /// Folds one frame's digest into a running stream digest (order matters).
    public static func chain(_ running: UInt64, _ frame: UInt64) -> UInt64 {
        (running ^ frame).rotateLeft(29) &* 0xBF58_476D_1CE4_E5B9 &+ 0x94D0_49BB_1331_11EB
    }
}

extension UInt64 {
    @inline(__always) func rotateLeft(_ n: UInt64) -> UInt64 { (self << n) | (self >> (64 - n)) }
}
