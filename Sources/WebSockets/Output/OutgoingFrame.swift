/// Immutable bytes of one text frame, built once and shared by every connection that sends it.
///
/// The frame is stored already framed for the wire (WebSocket header followed by the payload),
/// so the service thread hands the same storage to every socket without copying or re-framing
/// it, and may write several queued frames to one socket in a single system call.
/// The payload must be valid UTF-8 (it goes out as a text frame); a `String` always is.
public final class OutgoingFrame: Sendable {
    /// Header plus payload, exactly as written to the socket. Never mutated.
    let wire: [UInt8]

    /// The payload size in bytes (without the WebSocket header).
    public let count: Int

    /// A text frame carrying `utf8` as its payload.
    public init(_ utf8: [UInt8]) {
        count = utf8.count
        var wire: [UInt8] = []
        wire.reserveCapacity(utf8.count + 10)
        wire.append(0x81)  // FIN + opcode 1 (text); server frames are never masked
        if utf8.count < 126 {
            wire.append(UInt8(utf8.count))
        } else if utf8.count <= 0xFFFF {
            wire.append(126)
            wire.append(UInt8(truncatingIfNeeded: utf8.count >> 8))
            wire.append(UInt8(truncatingIfNeeded: utf8.count))
        } else {
            wire.append(127)
            let length = UInt64(utf8.count)
            for shift in stride(from: 56, through: 0, by: -8) {
                wire.append(UInt8(truncatingIfNeeded: length >> UInt64(shift)))
            }
        }
        wire.append(contentsOf: utf8)
        self.wire = wire
    }

    /// A text frame carrying the UTF-8 bytes of `s`.
    public convenience init(_ s: String) {
        self.init(Array(s.utf8))
    }

    /// The payload bytes (a copy); for tests and logging.
    public var payload: [UInt8] { Array(wire[(wire.count - count)...]) }
}
