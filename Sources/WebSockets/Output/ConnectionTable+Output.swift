@_spi(Engine) import WebSocketEngine
/// What one connection receives next: its direct frames interleaved with its channel's log.
/// Pure functions of one connection and (when it has one) its channel.
extension ConnectionTable {
    /// A member's next frames (about `maxBytes` on the wire, at least one) from `channel`'s log
    /// and its direct queue, in the order of the type's ordering model.
    static func takeOutput(
        _ c: inout Connection, from channel: Channel, maxBytes: Int, into frames: inout [OutgoingFrame]
    ) -> Output {
        let logLimit: Int
        var draining = false
        switch c.state {
        case .pending:
            return .idle
        case .active:
            logLimit = channel.logEnd
        case let .closing(code, reason, drainUntil):
            guard let drainUntil else { return .close(code, reason) }
            logLimit = drainUntil
            draining = true
            skipCovered(&c, in: channel, logLimit: logLimit)
            if !hasOutput(c, in: channel, logLimit: logLimit) { return .close(code, reason) }
        }
        var bytes = 0
        var taken = 0
        while true {
            skipCovered(&c, in: channel, logLimit: logLimit)
            let frame: OutgoingFrame
            let isDirect: Bool
            if let d = c.direct.first, d.position <= c.cursor {
                (frame, isDirect) = (d.frame, true)
            } else if c.cursor < logLimit {
                (frame, isDirect) = (channel.log[c.cursor - channel.logStart].frame, false)
            } else {
                break
            }
            if taken > 0 && bytes + frame.wire.count > maxBytes { break }
            if isDirect {
                c.direct.removeFirst()
                if c.uncountedDirect > 0 {
                    c.uncountedDirect -= 1
                    c.uncountedBytes -= frame.wire.count
                }
            } else {
                c.cursor += 1
            }
            frames.append(frame)
            bytes += frame.wire.count
            taken += 1
        }
        if taken == 0 { return .idle }
        // A draining close still owes its close frame: ask to be called again.
        return .frames(more: draining || hasOutput(c, in: channel, logLimit: logLimit))
    }

    /// The next frames of a connection without a channel: nothing while pending; once closing,
    /// its direct frames (when it drains), then the close.
    static func takeOutput(_ c: inout Connection, maxBytes: Int, into frames: inout [OutgoingFrame]) -> Output {
        guard case let .closing(code, reason, drainUntil) = c.state else { return .idle }
        guard drainUntil != nil, !c.direct.isEmpty else { return .close(code, reason) }
        var bytes = 0
        while let d = c.direct.first, bytes == 0 || bytes + d.frame.wire.count <= maxBytes {
            c.direct.removeFirst()
            frames.append(d.frame)
            bytes += d.frame.wire.count
        }
        return .frames(more: true)  // the close frame is still owed
    }

    /// Takes a member of a channel being removed off it: a draining close keeps what it still
    /// had to receive from the log, as direct frames in the same order; anything else is closing
    /// without draining already (`removeChannel` closed the active ones first).
    static func detach(_ c: inout Connection, from channel: Channel) {
        defer {
            c.channel = nil
            c.cursor = 0
            c.skipThrough = .min
            c.uncountedDirect = 0
            c.uncountedBytes = 0
        }
        guard case let .closing(code, reason, drainUntil?) = c.state else {
            c.direct = DirectQueue()
            return
        }
        guard c.cursor >= channel.logStart else {
            // Cannot happen (a sweep closes such a member first); drop the drain rather than skip.
            c.state = .closing(code: code, reason: reason, drainUntil: nil)
            c.direct = DirectQueue()
            return
        }
        var due = DirectQueue()
        while true {
            skipCovered(&c, in: channel, logLimit: drainUntil)
            if let d = c.direct.first, d.position <= c.cursor {
                due.append(c.direct.removeFirst())
            } else if c.cursor < drainUntil {
                due.append(DirectEntry(position: 0, frame: channel.log[c.cursor - channel.logStart].frame))
                c.cursor += 1
            } else {
                break
            }
        }
        while !c.direct.isEmpty { due.append(c.direct.removeFirst()) }
        c.direct = due
    }

    /// Moves the cursor past broadcasts the connection's welcome already covered.
    private static func skipCovered(_ c: inout Connection, in channel: Channel, logLimit: Int) {
        var cursor = Swift.max(c.cursor, channel.logStart)
        while cursor < logLimit && channel.log[cursor - channel.logStart].seq <= c.skipThrough { cursor += 1 }
        c.cursor = cursor
    }

    /// Whether anything remains to send (seqs increase, so checking the last entry suffices).
    private static func hasOutput(_ c: Connection, in channel: Channel, logLimit: Int) -> Bool {
        if !c.direct.isEmpty { return true }
        return c.cursor < logLimit && channel.log[logLimit - 1 - channel.logStart].seq > c.skipThrough
    }
}
