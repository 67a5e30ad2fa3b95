import Conformance
import Coordinator

/// Command frames for load and stress clients. The commands themselves come from
/// `Conformance.randomCommand` (every kind; tabs added, moved and removed; some refused).
public enum RandomCommands {
    /// The next random command of `rng`'s sequence.
    public static func next(_ rng: inout SeededRandom) -> Command { randomCommand(&rng) }

    /// The frame a client sends: `{"type":…,"ref":ref,…}`.
    public static func frame(_ command: Command, ref: String?) -> [UInt8] {
        CommandEnvelope(ref: ref, command: command).json.compactBytes
    }
}
