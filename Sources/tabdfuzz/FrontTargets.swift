import WebSocketEngine
import WebSockets

/// What a peer can send to tabd's port, through the parsers of the network front, each fed
/// the same bytes whole and in pieces (the first byte of the input chooses where they are
/// cut): the results must not depend on how the bytes arrived.
///
/// `http`: a stream of requests through `HeadParser`, `RequestHead`'s checks, `RequestTarget`
/// and `BodyReader`, as a connection reads them one after another. Properties: the same
/// heads, bodies and refusal, at the same offsets, whole or in pieces; a head never takes
/// more bytes than it was given; a parsed head written out again parses to itself; a refusal
/// is one of the statuses the front answers; nothing traps.
enum HTTPTarget {
    static let refusals: Set<Int> = [400, 408, 413, 414, 431, 501, 505]

    /// One request as read: its head (or the refusal) and its body.
    struct Step: Equatable {
        var head: RequestHead?
        var refusal: Int?
        var body: [UInt8] = []
        var end = 0
    }

    static func run(_ bytes: [UInt8]) {
        guard let whole = sameWholeAndInPieces(bytes, largestPiece: 17, read) else { return }
        for step in whole {
            if let refusal = step.refusal { require(refusals.contains(refusal), "refused with \(refusal)") }
            if let head = step.head { roundTrip(head) }
        }
    }

    /// Reads requests the way a connection does, handing the bytes over `piece` at a time.
    static func read(_ input: [UInt8], piece: Int) -> [Step] {
        var steps: [Step] = []
        var start = 0        // where the current request starts
        var available = 0    // bytes handed over so far
        var parser = HeadParser()
        var reader: BodyReader?
        var current = Step()
        while steps.count < 16 {
            if available < input.count { available = min(input.count, available + max(1, piece)) }
            let unread = Array(input[start..<available])
            do throws(HTTPError) {
                if var body = reader {
                    let taken = try bytes(of: unread) { (b) throws(HTTPError) in try body.read(b) { current.body += $0 } }
                    require(taken <= unread.count, "the body reader took \(taken) of \(unread.count) bytes")
                    start += taken
                    reader = body
                    if body.isDone {
                        current.end = start
                        steps.append(current)
                        current = Step()
                        reader = nil
                        parser.reset()
                    } else if available == input.count {
                        break
                    }
                    continue
                }
                guard let (head, length) = try bytes(of: unread, { (b) throws(HTTPError) in try parser.parse(b) }) else {
                    if available == input.count { break }
                    continue
                }
                require(length <= unread.count, "a head of \(length) bytes out of \(unread.count)")
                start += length
                try head.checkHost()
                let framing = try head.bodyFraming()
                if HTTPMethod(rawValue: head.method) != nil { _ = try RequestTarget(head.target) }
                current.head = head
                reader = BodyReader(framing)
            } catch {
                // Where in the stream the refusal falls depends on the pieces; that it falls,
                // with which status, after which heads and bodies, does not.
                current.refusal = error.status
                current.end = -1
                steps.append(current)
                break
            }
        }
        return steps
    }

    /// Calls `body` with the bytes, keeping its typed error.
    static func bytes<R>(of array: [UInt8], _ body: (UnsafeRawBufferPointer) throws(HTTPError) -> R) throws(HTTPError) -> R {
        let result: Result<R, HTTPError> = array.withUnsafeBytes { raw in
            do throws(HTTPError) { return .success(try body(raw)) } catch { return .failure(error) }
        }
        return try result.get()
    }

    /// A head written out the way a client would parses back to the same head.
    static func roundTrip(_ head: RequestHead) {
        var text = "\(head.method) \(head.target) HTTP/1.\(head.minorVersion)\r\n"
        for field in head.fields { text += "\(field.name): \(field.value)\r\n" }
        text += "\r\n"
        var parser = HeadParser(limits: .init())
        let bytes = Array(text.utf8)
        do throws(HTTPError) {
            guard let (again, length) = try HTTPTarget.bytes(of: bytes, { (b) throws(HTTPError) in try parser.parse(b) }) else {
                require(false, "a written head is not whole: \(text.debugDescription)")
                return
            }
            require(again == head && length == bytes.count, "a written head parses otherwise: \(head) vs \(again)")
        } catch {
            // Only the limits can refuse it: a value may have held bytes that UTF-8 decoding
            // replaced, which then grow past a limit.
            require(error.status == 431 || error.status == 414, "a written head is refused with \(error.status): \(error.message)")
        }
    }
}

/// `frames`: client frames through `FrameDecoder`. Properties: the same events whole or in
/// pieces; no message over the limit; every text message is UTF-8; nothing after a close or
/// a failure.
enum FramesTarget {
    static let limit = 4_096

    static func run(_ bytes: [UInt8]) {
        guard let whole = sameWholeAndInPieces(bytes, largestPiece: 13, decode) else { return }
        for (i, event) in whole.enumerated() {
            switch event {
            case let .message(message, binary):
                require(message.count <= limit, "a message of \(message.count) bytes")
                require(!binary, "a binary message where they are refused")
                require(String(validating: message, as: UTF8.self) != nil, "a text message that is not UTF-8")
            case let .ping(payload), let .pong(payload):
                require(payload.count <= 125, "a control payload of \(payload.count) bytes")
            case .close, .failure:
                require(i == whole.count - 1, "events after a close or a failure")
            }
        }
    }

    static func decode(_ input: [UInt8], piece: Int) -> [FrameEvent] {
        var decoder = FrameDecoder(options: .init(maxMessageBytes: limit, expectsMaskedFrames: true, acceptsBinary: false))
        var events: [FrameEvent] = []
        var i = 0
        while i < input.count {
            let end = min(input.count, i + max(1, piece))
            input[i..<end].withUnsafeBytes { decoder.decode($0, into: &events) }
            i = end
        }
        return events
    }
}
