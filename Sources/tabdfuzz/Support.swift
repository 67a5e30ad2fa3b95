import Coordinator
import Dispatch
import Foundation
import Synchronization

/// A property of the code under test; a failure is a crash for libFuzzer (with the input saved).
func require(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String,
             file: StaticString = #file, line: UInt = #line) {
    if !condition() { fatalError("fuzz property failed: \(message())", file: file, line: line) }
}

/// What `read` makes of the input (all bytes but the first) given whole, once it has
/// required that the input cut in pieces of 1 to `largestPiece` bytes (the first byte
/// chooses) reads the same; nil for an empty input.
func sameWholeAndInPieces<Result: Equatable>(_ bytes: [UInt8], largestPiece: Int,
                                             _ read: ([UInt8], _ piece: Int) -> Result) -> Result? {
    guard let cut = bytes.first else { return nil }
    let input = Array(bytes.dropFirst())
    let whole = read(input, input.count)
    let piece = Int(cut) % largestPiece + 1
    let pieces = read(input, piece)
    require(whole == pieces, "pieces of \(piece) read otherwise than the whole: \(whole) vs \(pieces)")
    return whole
}

/// Runs async code to its end from libFuzzer's (synchronous) callback.
func blocking(_ body: @escaping @Sendable () async -> Void) {
    let done = DispatchSemaphore(value: 0)
    Task.detached {
        await body()
        done.signal()
    }
    done.wait()
}

/// Splits at `separator`, keeping empty pieces, at most `limit` pieces (the last gets the rest).
func pieces(_ bytes: [UInt8], separator: UInt8, limit: Int) -> [[UInt8]] {
    var out: [[UInt8]] = []
    var start = 0
    for (i, b) in bytes.enumerated() where b == separator && out.count < limit - 1 {
        out.append(Array(bytes[start..<i]))
        start = i + 1
    }
    out.append(Array(bytes[start...]))
    return out
}

/// A durable store that commits every batch at once, on its own queue, and keeps them.
final class MemoryStore: Durability, Sendable {
    private let queue = DispatchQueue(label: "tabdfuzz.store")
    private let state: Mutex<StoredState>

    init(_ stored: StoredState) { state = Mutex(stored) }

    func append(_ batch: EventBatch, generation: Int, done: @escaping @Sendable (CommandError?) -> Void) {
        queue.async { [self] in
            let error: CommandError? = state.withLock { s in
                do { try s.apply(batch); s.history.append(batch); return nil } catch {
                    return .unavailable("does not fold: \(error)")
                }
            }
            done(error)
        }
    }

    func committedState() -> StoredState { state.withLock { $0 } }
    func reset(generation: Int) {}
}

/// The limits of PROTOCOL.md that every state a coordinator publishes must keep.
func checkLimits(_ s: Snapshot, _ context: String) {
    require(!s.tabs.isEmpty && s.tabs.count <= Limits.maxTabs, "\(context): \(s.tabs.count) tabs")
    require(Set(s.tabs.map(\.id)).count == s.tabs.count, "\(context): duplicate tab ids")
    require(s.tab(s.selected) != nil, "\(context): selects '\(s.selected)', which it does not have")
    for t in s.tabs {
        let i = t.info
        require(i.id.unicodeScalars.count <= Limits.maxTabIDLength && i.id.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "_" || $0 == "-"
        } && !i.id.isEmpty, "\(context): tab id '\(i.id)'")
        require((1...Limits.maxTitleLength).contains(i.title.unicodeScalars.count), "\(context): title '\(i.title)'")
        require((1...Limits.maxIconLength).contains(i.icon.unicodeScalars.count), "\(context): icon '\(i.icon)'")
        require(i.color.utf8.count == 7 && i.color.first == "#" && i.color == i.color.uppercased(), "\(context): color '\(i.color)'")
        if let b = i.badge { require((1...Limits.maxBadgeLength).contains(b.unicodeScalars.count), "\(context): badge '\(b)'") }
        require((1...Limits.maxStackDepth).contains(t.stack.count), "\(context): stack of \(t.stack.count)")
        for p in t.stack { require((1...Limits.maxRouteLength).contains(p.route.unicodeScalars.count), "\(context): route '\(p.route)'") }
        require(t.scroll.isFinite && t.scroll >= 0, "\(context): scroll \(t.scroll)")
        require(t.values.count <= Limits.maxKeysPerTab, "\(context): \(t.values.count) keys")
        for (k, v) in t.values {
            require((1...Limits.maxKeyLength).contains(k.unicodeScalars.count), "\(context): key '\(k)'")
            require(v.compactBytes.count <= Limits.maxValueBytes, "\(context): value of \(v.compactBytes.count) bytes")
            require(v.firstRepeatedKey == nil, "\(context): value with a repeated key")
        }
    }
}

/// A fresh directory for one fuzz process's temporary files (state files, tabs files).
let scratchDirectory: String = {
    let base = ProcessInfo.processInfo.environment["TABD_FUZZ_TMP"] ?? NSTemporaryDirectory()
    let dir = (base as NSString).appendingPathComponent("tabdfuzz-\(getpid())")
    try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    return dir
}()
