import Conformance
import Testing
@testable import WebSocketEngine

/// One client frame as bytes: masked with `key` unless `masked` is false.
func clientFrame(_ opcode: UInt8, _ payload: [UInt8], fin: Bool = true, rsv: UInt8 = 0, masked: Bool = true,
                 key: [UInt8] = [0x37, 0xFA, 0x21, 0x3D]) -> [UInt8] {
    var out: [UInt8] = [(fin ? 0x80 : 0) | rsv << 4 | opcode]
    let maskBit: UInt8 = masked ? 0x80 : 0
    if payload.count < 126 {
        out.append(maskBit | UInt8(payload.count))
    } else if payload.count <= 0xFFFF {
        out += [maskBit | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
    } else {
        out.append(maskBit | 127)
        for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: payload.count >> shift)) }
    }
    guard masked else { return out + payload }
    return out + key + payload.enumerated().map { $0.element ^ key[$0.offset % 4] }
}

func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }

/// Decodes `input` fed in pieces of `piece` bytes (0: all at once).
func decode(_ input: [UInt8], piece: Int = 0, maxMessage: Int = 65_536, masked: Bool = true, binary: Bool = false) -> [FrameEvent] {
    var decoder = FrameDecoder(options: .init(maxMessageBytes: maxMessage, expectsMaskedFrames: masked, acceptsBinary: binary))
    var events: [FrameEvent] = []
    let size = piece == 0 ? max(1, input.count) : piece
    var i = 0
    while i < input.count {
        let end = min(input.count, i + size)
        input[i..<end].withUnsafeBytes { decoder.decode($0, into: &events) }
        i = end
    }
    return events
}

@Suite struct FrameDecoderTests {
    @Test func aMaskedTextFrameIsUnmaskedWhateverThePiecesItArrivesIn() {
        let message = bytes(#"{"type":"ping","ref":"ü€😀"}"#) + Array(repeating: 0x61, count: 300)
        let input = clientFrame(1, message)
        for piece in [0, 1, 2, 3, 5, 7, 64] {
            #expect(decode(input, piece: piece) == [.message(message, binary: false)], "pieces of \(piece)")
        }
    }

    @Test func lengthsOfSixteenAndSixtyFourBitsAreRead() {
        let medium = Array(repeating: UInt8(0x62), count: 40_000)
        let large = Array(repeating: UInt8(0x63), count: 70_000)
        #expect(decode(clientFrame(1, medium)) == [.message(medium, binary: false)])
        #expect(decode(clientFrame(1, large), maxMessage: 100_000) == [.message(large, binary: false)])
        #expect(decode(clientFrame(1, [])) == [.message([], binary: false)])
    }

    @Test func fragmentsAreJoinedAndControlFramesBetweenThemAreReportedInOrder() {
        let input = clientFrame(1, bytes("hel"), fin: false) + clientFrame(9, bytes("p1")) + clientFrame(0, bytes("lo "), fin: false)
            + clientFrame(10, bytes("q")) + clientFrame(0, bytes("world")) + clientFrame(1, bytes("next"))
        for piece in [0, 1, 4] {
            #expect(decode(input, piece: piece) == [
                .ping(bytes("p1")), .pong(bytes("q")), .message(bytes("hello world"), binary: false),
                .message(bytes("next"), binary: false),
            ])
        }
    }

    @Test func aCharacterSplitAcrossFragmentsIsValidAndABadByteFailsAtOnce() {
        let euro: [UInt8] = [0xE2, 0x82, 0xAC]
        let split = clientFrame(1, [0x61, euro[0]], fin: false) + clientFrame(0, [euro[1], euro[2]])
        #expect(decode(split) == [.message([0x61] + euro, binary: false)])
        // The bad byte is refused in the first fragment, before the message ends.
        #expect(decode(clientFrame(1, [0x61, 0xFF], fin: false)) == [.failure(.invalidPayload, "text is not UTF-8")])
        // A message ending inside a character.
        #expect(decode(clientFrame(1, [0x61, euro[0]])) == [.failure(.invalidPayload, "text is not UTF-8")])
    }

    @Test(arguments: [
        ("reserved bit 1", clientFrame(1, bytes("x"), rsv: 4), FrameEvent.failure(.protocolError, "reserved bits set")),
        ("reserved bits 2 and 3", clientFrame(1, bytes("x"), rsv: 3), .failure(.protocolError, "reserved bits set")),
        ("reserved data opcode", clientFrame(3, bytes("x")), .failure(.protocolError, "reserved opcode 3")),
        ("reserved control opcode", clientFrame(0xB, bytes("x")), .failure(.protocolError, "reserved opcode 11")),
        ("fragmented ping", clientFrame(9, bytes("x"), fin: false), .failure(.protocolError, "fragmented control frame")),
        ("control frame of 126 bytes", clientFrame(9, Array(repeating: 0, count: 126)),
         .failure(.protocolError, "control frame longer than 125 bytes")),
        ("continuation without a start", clientFrame(0, bytes("x")), .failure(.protocolError, "continuation without a message")),
        ("new message inside a fragmented one", clientFrame(1, bytes("a"), fin: false) + clientFrame(1, bytes("b")),
         .failure(.protocolError, "new message inside a fragmented one")),
        ("unmasked frame", clientFrame(1, bytes("x"), masked: false), .failure(.protocolError, "unmasked frame")),
        ("binary frame", clientFrame(2, [0, 1]), .failure(.unsupportedData, "binary frames are not supported")),
        ("64-bit length with its top bit", [0x81, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0],
         .failure(.protocolError, "frame length has its top bit set")),
    ] as [(String, [UInt8], FrameEvent)])
    func eachProtocolErrorEndsTheStreamWithItsCode(name: String, input: [UInt8], expected: FrameEvent) {
        // Whatever follows the faulty frame is not read.
        for piece in [0, 1] {
            #expect(decode(input + clientFrame(1, bytes("after")), piece: piece) == [expected], "\(name)")
        }
    }

    @Test func aMessageOverTheLimitIsRefusedFromItsHeaderAloneAlsoAcrossFragments() {
        #expect(decode(clientFrame(1, Array(repeating: 0x61, count: 100)), maxMessage: 100) == [
            .message(Array(repeating: 0x61, count: 100), binary: false),
        ])
        // Only the header of the too-long frame is sent: refused before its payload comes.
        let header = Array(clientFrame(1, Array(repeating: 0x61, count: 101)).prefix(6))
        #expect(decode(header, maxMessage: 100) == [.failure(.messageTooBig, "message too big")])
        let fragments = clientFrame(1, Array(repeating: 0x61, count: 60), fin: false) + clientFrame(0, Array(repeating: 0x61, count: 41))
        #expect(decode(fragments, maxMessage: 100) == [.failure(.messageTooBig, "message too big")])
    }

    @Test(arguments: [
        ([], FrameEvent.close(code: nil, reason: "")),
        ([0x03, 0xE8] + bytes("bye"), .close(code: 1000, reason: "bye")),
        ([0x0F, 0xA0], .close(code: 4000, reason: "")),
        ([0x03], .failure(.protocolError, "a close body of one byte")),
        ([0x03, 0xED], .failure(.protocolError, "close code 1005 is not allowed")),
        ([0x00, 0x00], .failure(.protocolError, "close code 0 is not allowed")),
        ([0x13, 0x88], .failure(.protocolError, "close code 5000 is not allowed")),
        ([0x03, 0xE8, 0xFF, 0xFE], .failure(.invalidPayload, "close reason is not UTF-8")),
    ] as [([UInt8], FrameEvent)])
    func aCloseBodyIsChecked(payload: [UInt8], expected: FrameEvent) {
        // Nothing after a close is read.
        #expect(decode(clientFrame(8, payload) + clientFrame(1, bytes("x"))) == [expected])
    }

    @Test func aClientReadsUnmaskedFramesAndBinaryWhenAllowed() {
        #expect(decode(clientFrame(2, [1, 2, 3], masked: false), masked: false, binary: true) == [.message([1, 2, 3], binary: true)])
        #expect(decode(clientFrame(1, bytes("x")), masked: false) == [.failure(.protocolError, "masked frame from a server")])
    }
}

@Suite struct UTF8ValidatorTests {
    @Test(arguments: [
        ([0x61, 0x62], true), ([0xC3, 0xBC], true), ([0xE2, 0x82, 0xAC], true), ([0xF0, 0x9F, 0x98, 0x80], true),
        ([0xF4, 0x8F, 0xBF, 0xBF], true), ([0xED, 0x9F, 0xBF], true),
        ([0x80], false), ([0xC0, 0x80], false), ([0xC1, 0xBF], false), ([0xE0, 0x80, 0x80], false),
        ([0xED, 0xA0, 0x80], false), ([0xF0, 0x80, 0x80, 0x80], false), ([0xF4, 0x90, 0x80, 0x80], false),
        ([0xF5, 0x80, 0x80, 0x80], false), ([0xFF], false), ([0xC3], false), ([0xE2, 0x82], false),
    ] as [([UInt8], Bool)])
    func sequencesAreJudgedAsRFC3629SaysWhereverTheyAreSplit(input: [UInt8], valid: Bool) {
        let padded = Array(repeating: UInt8(0x20), count: 9) + input + Array(repeating: 0x20, count: 9)
        for split in 0...padded.count {
            var validator = UTF8Validator()
            let ok = padded[..<split].withUnsafeBytes { validator.feed($0) } && padded[split...].withUnsafeBytes { validator.feed($0) }
            #expect((ok && validator.isAtBoundary) == valid, "\(input) split at \(split)")
        }
    }

    @Test func randomBytesGetTheStandardLibrarysVerdict() {
        var generator = SeededRandom(seed: 7)
        for _ in 0..<5_000 {
            let count = Int(generator.next() % 24)
            let input = (0..<count).map { _ -> UInt8 in
                let r = generator.next()
                // Mostly bytes that make real sequences, some of anything.
                return r % 3 == 0 ? UInt8(truncatingIfNeeded: r >> 8) : [0x61, 0xC3, 0xBC, 0xE2, 0x82, 0xAC, 0xF0, 0x9F, 0x98, 0x80, 0xED, 0xA0][Int(r >> 8) % 12]
            }
            let expected = String(validating: input, as: UTF8.self) != nil
            #expect(input.withUnsafeBytes { UTF8Validator.isValid($0) } == expected, "\(input)")
        }
    }
}

@Suite struct HandshakeTests {
    @Test func theAcceptKeyIsTheOneOfRFC6455() {
        #expect(HandshakeKey.accept(for: "dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
    }

    @Test func sha1MatchesItsStandardVectors() {
        func hex(_ d: [UInt8]) -> String { d.map { String(format: "%02x", $0) }.joined() }
        #expect(hex(SHA1.digest(bytes("abc"))) == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(hex(SHA1.digest([])) == "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        #expect(hex(SHA1.digest(bytes("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")))
            == "84983e441c3bd26ebaae4aa1f95129e5e54670f1")
    }

    @Test(arguments: [
        ("dGhlIHNhbXBsZSBub25jZQ==", true), ("AAAAAAAAAAAAAAAAAAAAAA==", true), ("dGhlIHNhbXBsZSBub25jZQ=", false),
        ("dGhlIHNhbXBsZSBub25jZQ", false), ("dGhlIHNhbXBsZSBub25jZR==", false), ("dGhlIHNhbXBsZSBub25j*Q==", false), ("", false),
    ])
    func aKeyMustBeSixteenBytesOfBase64(key: String, valid: Bool) {
        #expect(HandshakeKey.isValidKey(key) == valid)
    }
}

