import Auth
import Coordinator

/// What a welcomed connection's frame becomes, decided in the order of error precedence:
/// `rate_limited` (the connection's limiter refused it), `bad_json` and `bad_command`
/// (parsing), `forbidden` (its role), `unavailable` (the daemon is stopping); else the
/// command. Later checks (`unknown_tab`, `invalid`) belong to the rules that carry the
/// command out.
package enum FrameReader {
    package enum Reading: Sendable {
        case command(CommandEnvelope)
        /// The error frame to answer; `parsed` is the command's type when it parsed (for
        /// the commands counter).
        case refused(ServerFrame, parsed: String?)
        /// A `refresh`: the connection's token to replace (any role may send it).
        case refresh(ref: String?, token: String)
    }

    /// The limits, said in a `rate_limited` refusal.
    package struct Limits: Sendable {
        package var commandsPerSecond: Int
        package var bytesPerSecond: Int

        package init(commandsPerSecond: Int, bytesPerSecond: Int) {
            self.commandsPerSecond = commandsPerSecond; self.bytesPerSecond = bytesPerSecond
        }
    }

    package static func read(_ frame: [UInt8], role: Role, allowed: Bool, stopping: Bool, limits: Limits) -> Reading {
        guard allowed else {
            let error = CommandError(.rateLimited, "more than \(limits.commandsPerSecond) commands or \(limits.bytesPerSecond) bytes per second")
            return .refused(.error(ref: nil, error), parsed: nil)
        }
        let envelope: CommandEnvelope
        do { envelope = try CommandEnvelope.parse(frame) } catch {
            // Not a command: a refresh is read again whole (it is rare: once per token).
            if error.error.code == .badCommand, let refresh = refresh(frame) {
                if case .refresh = refresh, stopping { return .refused(.error(ref: nil, .unavailable("tabd is shutting down")), parsed: "refresh") }
                return refresh
            }
            return .refused(.error(ref: error.ref, error.error), parsed: nil)
        }
        let type = envelope.command.type
        guard role.maySend(envelope.command) else {
            return .refused(.error(ref: envelope.ref, .forbidden("role \(role.rawValue) may send only sync, ping and clients")), parsed: type)
        }
        if stopping { return .refused(.error(ref: envelope.ref, .unavailable("tabd is shutting down")), parsed: type) }
        return .command(envelope)
    }

    /// `{"type":"refresh","token":…,"ref":…}`, read; nil when the frame is not a refresh.
    static func refresh(_ frame: [UInt8]) -> Reading? {
        guard let json = try? JSONParser.parse(frame), json["type"]?.stringValue == "refresh" else { return nil }
        var ref: String?
        switch json["ref"] {
        case nil, .null?: ref = nil
        case let .string(s)?:
            guard s.unicodeScalars.count <= maxRefLength else {
                return .refused(.error(ref: nil, .invalid("'ref' is longer than \(maxRefLength) characters")), parsed: "refresh")
            }
            ref = s
        default: return .refused(.error(ref: nil, .badCommand("'ref' must be a string")), parsed: "refresh")
        }
        guard let token = json["token"]?.stringValue, !token.isEmpty else {
            return .refused(.error(ref: ref, .badCommand("refresh needs a non-empty string field 'token'")), parsed: "refresh")
        }
        return .refresh(ref: ref, token: token)
    }
}

/// The protocol's bound on a `ref` (``FrameReader.Limits`` hides the module's `Limits`).
private let maxRefLength = Limits.maxRefLength
