import Testing
@testable import WebSockets

/// Parses `text` fed in pieces of `piece` bytes (0: all at once): the head and the bytes it
/// took, nil while incomplete, or the refusal.
func parseHead(_ text: [UInt8], piece: Int = 0, limits: HeadParser.Limits = .init()) -> Result<(RequestHead, Int)?, HTTPError> {
    var parser = HeadParser(limits: limits)
    let size = piece == 0 ? max(1, text.count) : piece
    var end = 0
    repeat {
        end = min(text.count, end + size)
        do {
            if let parsed = try withBytes(text[..<end], { (b) throws(HTTPError) in try parser.parse(b) }) {
                return .success(parsed)
            }
        } catch {
            return .failure(error)
        }
    } while end < text.count
    return .success(nil)
}

/// Calls `body` with the slice's bytes, keeping its typed error.
func withBytes<R>(_ slice: ArraySlice<UInt8>, _ body: (UnsafeRawBufferPointer) throws(HTTPError) -> R) throws(HTTPError) -> R {
    let result: Result<R, HTTPError> = slice.withUnsafeBytes { raw in
        do throws(HTTPError) { return .success(try body(raw)) } catch { return .failure(error) }
    }
    return try result.get()
}

func status(_ text: String) -> Int? {
    if case let .failure(error) = parseHead(Array(text.utf8)) { return error.status }
    return nil
}

@Suite struct HeadParserTests {
    @Test func aHeadIsReadWholeWhateverThePiecesAndEndsWhereItsBlankLineDoes() {
        let head = "GET /ws?name=a%20b HTTP/1.1\r\nHost: x:1\r\nUpgrade:  websocket \r\nX-Empty:\r\n\r\n"
        let input = Array((head + "BODY").utf8)
        for piece in [0, 1, 2, 7] {
            guard case let .success(parsed?) = parseHead(input, piece: piece) else {
                Issue.record("no head in pieces of \(piece)")
                continue
            }
            #expect(parsed.1 == head.utf8.count)
            #expect(parsed.0 == RequestHead(method: "GET", target: "/ws?name=a%20b", minorVersion: 1, fields: [
                .init(name: "host", value: "x:1"), .init(name: "upgrade", value: "websocket"), .init(name: "x-empty", value: ""),
            ]))
        }
    }

    @Test func bareLineFeedsAndEmptyLinesBeforeTheRequestLineAreAccepted() {
        guard case let .success(parsed?) = parseHead(Array("\r\n\n\r\nGET / HTTP/1.0\nHost: y\n\n".utf8)) else {
            Issue.record("not parsed")
            return
        }
        #expect(parsed.0 == RequestHead(method: "GET", target: "/", minorVersion: 0, fields: [.init(name: "host", value: "y")]))
    }

    @Test func anIncompleteHeadWaits() {
        #expect(status("GET / HTTP/1.1\r\nHost: x\r\n") == nil)
        if case .success(let parsed) = parseHead(Array("GET / HTTP/1.1\r\nHost: x\r\n".utf8)) { #expect(parsed == nil) }
    }

    @Test(arguments: [
        ("GET /\r\n\r\n", 400), ("GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400), ("GET / HTTP/1.1 extra\r\nHost: x\r\n\r\n", 400),
        ("GET / http/1.1\r\nHost: x\r\n\r\n", 400), ("GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505), ("GET / HTTP/1.2\r\nHost: x\r\n\r\n", 505),
        ("GET / HTTP/11\r\nHost: x\r\n\r\n", 400), ("G(T / HTTP/1.1\r\nHost: x\r\n\r\n", 400), ("GET /\u{7F} HTTP/1.1\r\n\r\n", 400),
        ("GET /\0 HTTP/1.1\r\nHost: x\r\n\r\n", 400), ("GET / HTTP/1.1\r\nHo\0st: x\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: x\0y\r\n\r\n", 400), ("GET /\r HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: x\ry\r\n\r\n", 400), ("GET / HTTP/1.1\r\nHost: \u{01}\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: \u{7F}\r\n\r\n", 400), ("GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400), ("GET / HTTP/1.1\r\n\tfolded\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nno colon\r\n\r\n", 400), ("GET / HTTP/1.1\r\n: empty name\r\n\r\n", 400),
    ] as [(String, Int)])
    func whatAHeadMayNeverHoldIsRefused(input: String, expected: Int) {
        #expect(status(input) == expected, "\(input.debugDescription)")
    }

    @Test func limitsAreCheckedAsBytesArriveNotOnlyAtTheEnd() {
        var limits = HeadParser.Limits()
        limits.maxRequestLine = 32
        limits.maxHead = 100
        limits.maxFields = 3
        func refused(_ text: String) -> Int? {
            // Never whole: the refusal comes from the bytes so far.
            if case let .failure(error) = parseHead(Array(text.utf8), piece: 1, limits: limits) { return error.status }
            return nil
        }
        #expect(refused("GET /" + String(repeating: "a", count: 40)) == 414)
        #expect(refused("GET / HTTP/1.1\r\nX: " + String(repeating: "b", count: 120)) == 431)
        #expect(refused("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n") == 431)
        #expect(refused("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n") == nil)
    }
}

@Suite struct RequestFramingTests {
    func framing(_ fields: [(String, String)], version: Int = 1) -> Result<BodyFraming, HTTPError> {
        let head = RequestHead(method: "POST", target: "/", minorVersion: version, fields: fields.map { .init(name: $0.0, value: $0.1) })
        do { return .success(try head.bodyFraming()) } catch { return .failure(error) }
    }

    @Test(arguments: [
        ([], BodyFraming.none), ([("content-length", "0")], .length(0)), ([("content-length", "12")], .length(12)),
        ([("content-length", "2"), ("content-length", "2")], .length(2)), ([("content-length", "2, 2")], .length(2)),
        ([("transfer-encoding", "chunked")], .chunked), ([("transfer-encoding", "Chunked")], .chunked),
    ] as [([(String, String)], BodyFraming)])
    func aTrustworthyFramingIsRead(fields: [(String, String)], expected: BodyFraming) throws {
        #expect(try framing(fields).get() == expected)
    }

    @Test(arguments: [
        ([("content-length", "-1")], 400), ([("content-length", "abc")], 400), ([("content-length", "1e3")], 400),
        ([("content-length", "")], 400), ([("content-length", "99999999999999999999999")], 400),
        ([("content-length", "5"), ("content-length", "6")], 400), ([("content-length", "5, 6")], 400),
        ([("content-length", "5,")], 400), ([("content-length", "+5")], 400),
        ([("transfer-encoding", "chunked"), ("content-length", "5")], 400), ([("transfer-encoding", "gzip")], 501),
        ([("transfer-encoding", "chunked, gzip")], 501), ([("transfer-encoding", "identity")], 501),
        ([("transfer-encoding", "gzip"), ("transfer-encoding", "chunked")], 501),
    ] as [([(String, String)], Int)])
    func aFramingThatCouldSmuggleARequestIsRefused(fields: [(String, String)], expected: Int) {
        guard case let .failure(error) = framing(fields) else {
            Issue.record("\(fields) accepted")
            return
        }
        #expect(error.status == expected)
    }

    @Test func http10HasNoChunkedBodiesAndKeepsAliveOnlyWhenAsked() {
        if case let .failure(error) = framing([("transfer-encoding", "chunked")], version: 0) { #expect(error.status == 400) } else {
            Issue.record("chunked accepted in HTTP/1.0")
        }
        #expect(!RequestHead(method: "GET", target: "/", minorVersion: 0).keepsAlive)
        #expect(RequestHead(method: "GET", target: "/", minorVersion: 0, fields: [.init(name: "connection", value: "Keep-Alive")]).keepsAlive)
        #expect(RequestHead(method: "GET", target: "/", minorVersion: 1).keepsAlive)
        #expect(!RequestHead(method: "GET", target: "/", minorVersion: 1, fields: [.init(name: "connection", value: "close")]).keepsAlive)
    }

    @Test func anHTTP11RequestHasExactlyOneHost() {
        #expect(throws: HTTPError.self) { try RequestHead(method: "GET", target: "/").checkHost() }
        #expect(throws: HTTPError.self) {
            try RequestHead(method: "GET", target: "/", fields: [.init(name: "host", value: "a"), .init(name: "host", value: "b")]).checkHost()
        }
        #expect(throws: Never.self) { try RequestHead(method: "GET", target: "/", fields: [.init(name: "host", value: "a")]).checkHost() }
        #expect(throws: Never.self) { try RequestHead(method: "GET", target: "/", minorVersion: 0).checkHost() }
    }
}

@Suite struct BodyReaderTests {
    /// The body read from `input` in pieces, and how many bytes were taken in all.
    func read(_ framing: BodyFraming, _ input: [UInt8], piece: Int = 0) -> Result<(body: [UInt8], taken: Int, done: Bool), HTTPError> {
        var reader = BodyReader(framing)
        var body: [UInt8] = []
        var taken = 0
        let size = piece == 0 ? max(1, input.count) : piece
        while taken < input.count && !reader.isDone {
            let end = min(input.count, taken + size)
            do {
                taken += try withBytes(input[taken..<end]) { (b) throws(HTTPError) in try reader.read(b) { body += $0 } }
            } catch {
                return .failure(error)
            }
        }
        return .success((body, taken, reader.isDone))
    }

    @Test func aLengthBodyStopsAtItsLength() throws {
        let r = try read(.length(5), Array("helloGET /".utf8)).get()
        #expect((r.body, r.taken, r.done) == (Array("hello".utf8), 5, true))
    }

    @Test func aChunkedBodyIsDecodedWithItsExtensionsAndTrailersWhateverThePieces() throws {
        let input = Array("4;name=value\r\nWiki\r\n5 ; x\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nExpires: never\r\n\r\nNEXT".utf8)
        for piece in [0, 1, 2, 3, 9] {
            let r = try read(.chunked, input, piece: piece).get()
            #expect(String(decoding: r.body, as: UTF8.self) == "Wikipedia in\r\n\r\nchunks.", "pieces of \(piece)")
            #expect((r.taken, r.done) == (input.count - 4, true))
        }
        let bare = try read(.chunked, Array("3\nabc\n0\n\n".utf8)).get()
        #expect((String(decoding: bare.body, as: UTF8.self), bare.done) == ("abc", true))
    }

    @Test(arguments: [
        "zz\r\n", "-5\r\nabc\r\n", "\r\n", String(repeating: "f", count: 9) + "\r\n", "3\r\nabcX\r\n", "3\r\nabc\rX",
        "3\r\nabc\r\n0\r\nX: a\0b\r\n\r\n", "3;\u{01}\r\n", "3\rX",
    ])
    func aBogusChunkIsRefused(input: String) {
        guard case let .failure(error) = read(.chunked, Array(input.utf8)) else {
            Issue.record("\(input.debugDescription) accepted")
            return
        }
        #expect(error.status == 400, "\(input.debugDescription)")
    }

    @Test func chunkSizeLinesAndTrailersAreBounded() {
        let longExtension = "1;" + String(repeating: "e", count: 5_000) + "\r\n"
        if case let .failure(error) = read(.chunked, Array(longExtension.utf8)) { #expect(error.status == 400) } else {
            Issue.record("a 5 KB chunk extension was accepted")
        }
        let manyTrailers = "0\r\n" + String(repeating: "X-T: " + String(repeating: "t", count: 1_000) + "\r\n", count: 20)
        if case let .failure(error) = read(.chunked, Array(manyTrailers.utf8)) { #expect(error.status == 431) } else {
            Issue.record("20 KB of trailers were accepted")
        }
    }
}

@Suite struct RequestTargetTests {
    @Test func pathsAreDecodedAndNormalizedAndQueriesSplit() throws {
        let t = try RequestTarget("/a/./b//c/../d%20e?name=k%C3%BCche&flag&x=1;y=a+b&x=2")
        #expect(t.path == "/a/b/d e")
        #expect(t.query == ["name": "küche", "flag": "", "x": "2", "y": "a b"])
        #expect(try RequestTarget("/../../etc/passwd").path == "/etc/passwd")
        #expect(try RequestTarget("/api/").path == "/api/")
        #expect(try RequestTarget("/").path == "/")
        #expect(try RequestTarget("/x#frag").path == "/x")
    }

    @Test func theQueryStringAloneSplitsAndDecodes() throws {
        func q(_ text: String) throws -> [String: String] { try RequestTarget.query(Array(text.utf8)) }
        #expect(try q("") == [:])
        #expect(try q("&&;") == [:], "empty parts are skipped")
        #expect(try q("a=b=c") == ["a": "b=c"], "split at the first =")
        #expect(try q("=v&k=") == ["": "v", "k": ""])
        #expect(try q("room=a&room=b") == ["room": "b"], "the last of a name wins")
        #expect(try q("t=a%2Bb+c&n%61me=x") == ["t": "a+b c", "name": "x"], "names decode too; + is a space, %2B a plus")
        #expect(try q("token=abc%26room%3Dx") == ["token": "abc&room=x"], "an encoded & does not split")
        for bad in ["a=%", "a=%G0", "a=%00", "a%FF=1"] {
            #expect(throws: HTTPError.self, "\(bad)") { try q(bad) }
        }
    }

    @Test(arguments: ["*", "http://host/x", "/%zz", "/%4", "/a%00b", "/%FF", "/?q=%C3"])
    func badTargetsAreRefused(target: String) {
        #expect(throws: HTTPError.self) { try RequestTarget(target) }
    }
}

@Suite struct TimerWheelTests {
    @Test func deadlinesComeDueInTheirTickAndOnlyOnce() {
        let tick = TimerWheel.tickNanoseconds
        var wheel = TimerWheel(now: 10 * tick)
        wheel.schedule(1, at: 10 * tick + 1)
        wheel.schedule(2, at: 12 * tick)
        wheel.schedule(3, at: 5 * tick)  // already past: due at the next look
        #expect(wheel.takeDue(now: 10 * tick).map(\.socket) == [3])
        #expect(wheel.takeDue(now: 11 * tick).map(\.socket) == [1])
        #expect(wheel.takeDue(now: 11 * tick).isEmpty)
        #expect(wheel.takeDue(now: 20 * tick).map(\.socket) == [2])
        #expect(wheel.count == 0)
    }
}
