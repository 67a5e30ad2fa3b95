/// What a stream of WebSocket frames from a peer says, one event at a time.
package enum FrameEvent: Equatable, Sendable {
    /// A whole data message: its fragments joined and unmasked; a text message is UTF-8.
    case message([UInt8], binary: Bool)
    /// A ping, with its payload (to be echoed in a pong).
    case ping([UInt8])
    /// A pong (answers a ping, or an unsolicited heartbeat).
    case pong([UInt8])
    /// The peer's close frame, checked (RFC 6455 §5.5.1, §7.4): its code (nil for an empty
    /// body) and its reason. Nothing after it is read.
    case close(code: UInt16?, reason: String)
    /// The peer broke the protocol, or sent what this side refuses: close with this code
    /// and reason. Nothing after it is read.
    case failure(CloseCode, String)
}

/// Reads WebSocket frames (RFC 6455 §5) from bytes that arrive in pieces of any size, and
/// turns them into ``FrameEvent``s. Pure: no I/O, no clock; every byte is looked at once.
///
/// Checks, each a `failure` that ends the stream: reserved bits, reserved opcodes, control
/// frames that are fragmented or longer than 125 bytes, a continuation without a message or
/// a new message inside a fragmented one, a frame masked the wrong way for its sender
/// (clients must mask, servers must not), a 64-bit length with its top bit set (1002);
/// binary messages where they are refused (1003); text that is not UTF-8, checked as it
/// arrives (1007); a message over the size limit, known from a frame's header before its
/// payload is read (1009); a close body of one byte or with a code that must not be sent
/// (1002), or whose reason is not UTF-8 (1007).
package struct FrameDecoder: Sendable {
    package struct Options: Sendable {
        /// The longest message, counted over all its fragments.
        package var maxMessageBytes: Int
        /// Frames must be masked (the server reads a client) or must not be (the client
        /// reads a server).
        package var expectsMaskedFrames: Bool
        /// Binary messages are refused with 1003 when false.
        package var acceptsBinary: Bool

        package init(maxMessageBytes: Int, expectsMaskedFrames: Bool, acceptsBinary: Bool) {
            self.maxMessageBytes = maxMessageBytes
            self.expectsMaskedFrames = expectsMaskedFrames
            self.acceptsBinary = acceptsBinary
        }
    }

    private enum Stage: Sendable { case header, payload, stopped }

    package let options: Options
    private var stage = Stage.header

    // The frame being read.
    private var header: [UInt8] = []
    private var headerLength = 2
    private var opcode: UInt8 = 0
    private var fin = false
    private var mask: UInt32 = 0
    private var maskOffset = 0
    private var remaining = 0

    // The message being read (possibly over several frames).
    private var messageOpcode: UInt8? = nil
    private var message: [UInt8] = []
    private var utf8 = UTF8Validator()
    private var control: [UInt8] = []

    package init(options: Options) {
        self.options = options
        header.reserveCapacity(14)
    }

    /// Reads `input` and appends what it completes to `events`; after a `close` or a
    /// `failure`, reads nothing more.
    package mutating func decode(_ input: UnsafeRawBufferPointer, into events: inout [FrameEvent]) {
        guard let base = input.baseAddress else { return }
        var i = 0
        let count = input.count
        while i < count {
            switch stage {
            case .stopped:
                return
            case .header:
                while header.count < headerLength && i < count {
                    header.append(base.load(fromByteOffset: i, as: UInt8.self))
                    i += 1
                    if header.count == 2, let failure = checkFirstTwoBytes() {
                        fail(failure, &events)
                        return
                    }
                }
                guard header.count == headerLength else { return }
                if let failure = startPayload() {
                    fail(failure, &events)
                    return
                }
                if remaining == 0 { finishFrame(&events) }
            case .payload:
                let take = min(remaining, count - i)
                readPayload(UnsafeRawBufferPointer(start: base + i, count: take))
                i += take
                remaining -= take
                if opcode < 8 && messageOpcode == 1 {
                    // Text: checked as it arrives, so a bad byte ends the stream at once.
                    let start = message.count - take
                    let ok = message.withUnsafeBytes { utf8.feed(UnsafeRawBufferPointer(rebasing: $0[start...])) }
                    if !ok {
                        fail((.invalidPayload, "text is not UTF-8"), &events)
                        return
                    }
                }
                if remaining == 0 { finishFrame(&events) }
            }
        }
    }

    // MARK: Frames

    /// The first two bytes say what the frame is and how long its header is.
    private mutating func checkFirstTwoBytes() -> (CloseCode, String)? {
        let b0 = header[0], b1 = header[1]
        fin = b0 & 0x80 != 0
        opcode = b0 & 0x0F
        if b0 & 0x70 != 0 { return (.protocolError, "reserved bits set") }
        switch opcode {
        case 0, 1, 2, 8, 9, 10: break
        default: return (.protocolError, "reserved opcode \(opcode)")
        }
        let masked = b1 & 0x80 != 0
        if masked != options.expectsMaskedFrames {
            return (.protocolError, options.expectsMaskedFrames ? "unmasked frame" : "masked frame from a server")
        }
        let length7 = Int(b1 & 0x7F)
        if opcode >= 8 {
            if !fin { return (.protocolError, "fragmented control frame") }
            if length7 > 125 { return (.protocolError, "control frame longer than 125 bytes") }
        } else {
            switch (opcode, messageOpcode) {
            case (0, nil): return (.protocolError, "continuation without a message")
            case (1, .some), (2, .some): return (.protocolError, "new message inside a fragmented one")
            case (2, nil) where !options.acceptsBinary: return (.unsupportedData, "binary frames are not supported")
            default: break
            }
        }
        headerLength = 2 + (length7 == 126 ? 2 : length7 == 127 ? 8 : 0) + (masked ? 4 : 0)
        return nil
    }

    /// The whole header is in: the payload's length and mask.
    private mutating func startPayload() -> (CloseCode, String)? {
        let length7 = header[1] & 0x7F
        var length: UInt64
        var offset = 2
        switch length7 {
        case 126:
            length = UInt64(header[2]) << 8 | UInt64(header[3])
            offset = 4
        case 127:
            length = 0
            for k in 2..<10 { length = length << 8 | UInt64(header[k]) }
            offset = 10
            if length >> 63 != 0 { return (.protocolError, "frame length has its top bit set") }
        default:
            length = UInt64(length7)
        }
        if options.expectsMaskedFrames {
            mask = UInt32(header[offset]) | UInt32(header[offset + 1]) << 8 | UInt32(header[offset + 2]) << 16
                | UInt32(header[offset + 3]) << 24
        } else {
            mask = 0
        }
        maskOffset = 0
        if opcode < 8 {
            if length > UInt64(options.maxMessageBytes - message.count) {
                return (.messageTooBig, "message too big")
            }
            if opcode != 0 {
                messageOpcode = opcode
                utf8.reset()
            }
        } else {
            control.removeAll(keepingCapacity: true)
        }
        remaining = Int(length)
        header.removeAll(keepingCapacity: true)
        headerLength = 2
        stage = .payload
        return nil
    }

    /// Appends a piece of the payload, unmasked, to the message or the control frame.
    private mutating func readPayload(_ piece: UnsafeRawBufferPointer) {
        guard !piece.isEmpty else { return }
        let start: Int
        if opcode >= 8 {
            start = control.count
            control.append(contentsOf: piece)
            if mask != 0 { control.withUnsafeMutableBytes { Self.unmask($0, from: start, mask, &maskOffset) } }
        } else {
            start = message.count
            message.append(contentsOf: piece)
            if mask != 0 { message.withUnsafeMutableBytes { Self.unmask($0, from: start, mask, &maskOffset) } }
        }
    }

    private mutating func finishFrame(_ events: inout [FrameEvent]) {
        stage = .header
        switch opcode {
        case 8:
            stage = .stopped
            events.append(control.withUnsafeBytes { Self.checkClose($0) })
        case 9:
            events.append(.ping(control))
        case 10:
            events.append(.pong(control))
        default:
            guard fin else { return }
            let binary = messageOpcode == 2
            if !binary && !utf8.isAtBoundary {
                fail((.invalidPayload, "text is not UTF-8"), &events)
                return
            }
            messageOpcode = nil
            events.append(.message(message, binary: binary))
            message = []
        }
    }

    private mutating func fail(_ failure: (CloseCode, String), _ events: inout [FrameEvent]) {
        stage = .stopped
        message = []
        control = []
        events.append(.failure(failure.0, failure.1))
    }

    /// XORs `bytes[start...]` with the mask, continuing at `offset` (0...3) into it.
    private static func unmask(_ bytes: UnsafeMutableRawBufferPointer, from start: Int, _ mask: UInt32, _ offset: inout Int) {
        guard let base = bytes.baseAddress else { return }
        var i = start
        let end = bytes.count
        // Byte by byte until the mask lines up with its start, then eight bytes at a time.
        while i < end && offset != 0 {
            base.storeBytes(of: base.load(fromByteOffset: i, as: UInt8.self) ^ UInt8(truncatingIfNeeded: mask >> (8 * UInt32(offset))),
                            toByteOffset: i, as: UInt8.self)
            offset = (offset + 1) & 3
            i += 1
        }
        let wide = UInt64(mask) | UInt64(mask) << 32
        while i + 8 <= end {
            // Little-endian words: byte k of the word is byte k of the payload.
            let word = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: i, as: UInt64.self))
            base.storeBytes(of: (word ^ wide).littleEndian, toByteOffset: i, as: UInt64.self)
            i += 8
        }
        while i < end {
            base.storeBytes(of: base.load(fromByteOffset: i, as: UInt8.self) ^ UInt8(truncatingIfNeeded: mask >> (8 * UInt32(offset))),
                            toByteOffset: i, as: UInt8.self)
            offset = (offset + 1) & 3
            i += 1
        }
    }

    /// A peer's close body, checked: a code of its own (or none), a UTF-8 reason.
    package static func checkClose(_ payload: UnsafeRawBufferPointer) -> FrameEvent {
        if payload.isEmpty { return .close(code: nil, reason: "") }
        guard payload.count >= 2 else { return .failure(.protocolError, "a close body of one byte") }
        let code = UInt16(payload[0]) << 8 | UInt16(payload[1])
        switch code {
        case 1000...1003, 1007...1014, 3000...4999: break
        default: return .failure(.protocolError, "close code \(code) is not allowed")
        }
        let reason = UnsafeRawBufferPointer(rebasing: payload[2...])
        guard UTF8Validator.isValid(reason) else { return .failure(.invalidPayload, "close reason is not UTF-8") }
        return .close(code: code, reason: String(decoding: reason, as: UTF8.self))
    }
}
