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
            return .refused(.error(ref: error.ref, error.error), parsed: nil)
        }
        let type = envelope.command.type
        guard role.maySend(envelope.command) else {
            return .refused(.error(ref: envelope.ref, .forbidden("role \(role.rawValue) may send only sync, ping and clients")), parsed: type)
        }
        if stopping { return .refused(.error(ref: envelope.ref, .unavailable("tabd is shutting down")), parsed: type) }
        return .command(envelope)
    }
}
