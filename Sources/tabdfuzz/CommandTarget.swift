import Conformance
import Coordinator
import Synchronization

/// Client frames, one per line, through `CommandEnvelope.parse` and then a real (in-memory)
/// coordinator: a refused frame names a code of the parse stage; a parsed command,
/// re-encoded, parses to the same command; the coordinator applies the commands (limits,
/// lifecycle rules) and every batch it publishes keeps the stream rules (``StreamChecker``),
/// folds from the first snapshot to its own snapshot, and keeps PROTOCOL.md's limits.
enum CommandTarget {
    static let maxFrames = 24

    static func run(_ bytes: [UInt8]) {
        var commands: [CommandEnvelope] = []
        for frame in pieces(bytes, separator: 0x0A, limit: maxFrames) {
            do {
                let envelope = try CommandEnvelope.parse(frame)
                roundTrip(envelope)
                commands.append(envelope)
            } catch {
                let code = error.error.code
                require(code == .badJSON || code == .badCommand || code == .invalid, "parse refused with \(code)")
                if code == .invalid { require(error.ref == nil, "a too-long ref is answered with ref null") }
                if let ref = error.ref { require(ref.unicodeScalars.count <= Limits.maxRefLength, "ref of \(ref.unicodeScalars.count)") }
            }
        }
        guard !commands.isEmpty else { return }
        let list = commands
        blocking { await execute(list) }
    }

    static func roundTrip(_ envelope: CommandEnvelope) {
        if let ref = envelope.ref { require(ref.unicodeScalars.count <= Limits.maxRefLength, "accepted a ref of \(ref.unicodeScalars.count)") }
        // The encoder writes offsets as finite numbers only (a client never sends others).
        if case let .scroll(_, offset) = envelope.command, !offset.isFinite { return }
        let text = envelope.json.compactBytes
        do {
            let again = try CommandEnvelope.parse(text)
            require(again == envelope, "re-encoded command parses to another: \(envelope) vs \(again)")
        } catch {
            require(false, "re-encoded command \(String(decoding: text, as: UTF8.self)) is refused: \(error.error)")
        }
    }

    static func execute(_ commands: [CommandEnvelope]) async {
        let coordinator: Coordinator
        do { coordinator = try Coordinator() } catch { require(false, "default tabs refused: \(error)"); return }
        let welcome: Welcome
        do { welcome = try await coordinator.connect(.init(name: "fuzz")) } catch { require(false, "connect: \(error)"); return }
        guard let first = welcome.snapshot else { require(false, "welcome without snapshot"); return }
        let seen = Mutex<[EventBatch]>([])
        await coordinator.addObserver { batch in seen.withLock { $0.append(batch) } }
        for envelope in commands {
            do {
                let outcome = try await coordinator.execute(envelope.command, by: welcome.client.id, ref: envelope.ref)
                if case let .snapshot(s) = outcome { checkLimits(s, "sync answer") }
            } catch {
                require(error.code != .badJSON && error.code != .badCommand && !error.isConflict, "a parsed command refused with \(error.code)")
            }
        }
        let last = await coordinator.snapshot()
        var checker = StreamChecker(origin: first)
        for batch in seen.withLock({ $0 }) {
            do { try checker.check(batch) } catch { require(false, "stream rule broken: \(error)") }
        }
        require(checker.state == last, "the stream does not fold to the coordinator's snapshot")
        checkLimits(last, "after the commands")
    }
}
