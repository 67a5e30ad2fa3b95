import Testing
@testable import Coordinator
@testable import TabdProtocol

@Suite struct JSONTests {
    @Test(arguments: [
        #"{"a":1,"b":[true,false,null],"c":{"d":"e"}}"#, #"[1.50,-0,2e10,1E-5,0.0]"#, #""\u00e9\n\"\\""#,
        #"{"z":1,"a":2}"#, #""🏠 ünïcode""#, "123456789012345678901234567890",
    ])
    func valuesRoundTripExactlyInCompactForm(text: String) throws {
        let value = try JSONParser.parse(text)
        let again = try JSONParser.parse(value.compactBytes)
        #expect(again == value)
        if !text.contains("\\u") && !text.contains("\\n") { #expect(value.compactString == text) }
    }

    @Test func escapesAreDecodedAndControlCharactersReEscaped() throws {
        let value = try JSONParser.parse(#""a\u0001\t\ud83c\udfe0""#)
        #expect(value == .string("a\u{01}\t🏠"))
        #expect(value.compactString == #""a\u0001\t🏠""#)
    }

    @Test(arguments: [
        "", "{", "[1,]", "{\"a\":}", "01", "1.", "-", "+1", "tru", "nul", "\"\\x\"", "\"\\ud800\"", "\"\\udc00x\"",
        "{\"a\" 1}", "[1 2]", "\"\u{01}\"", "NaN", "Infinity", "1 2", "{\"a\":1,}",
    ])
    func malformedTextIsAParseErrorNotACrash(text: String) {
        #expect(throws: JSONParseError.self) { try JSONParser.parse(text) }
    }

    @Test func invalidUTF8IsAParseError() {
        #expect(throws: JSONParseError.self) { try JSONParser.parse([0x22, 0xFF, 0xFE, 0x22]) }
    }

    @Test func deepNestingIsRefusedInsteadOfOverflowingTheStack() throws {
        func nested(_ depth: Int) -> String { String(repeating: "[", count: depth) + String(repeating: "]", count: depth) }
        #expect(throws: JSONParseError.self) { try JSONParser.parse(nested(100_000)) }
        #expect(throws: JSONParseError.self) { try JSONParser.parse(nested(JSONParser.maxDepth + 1)) }
        // Exactly `maxDepth` levels still parse, to the value they spell.
        var deepest = JSONValue.array([])
        for _ in 1..<JSONParser.maxDepth { deepest = .array([deepest]) }
        #expect(try JSONParser.parse(nested(JSONParser.maxDepth)) == deepest)
    }

    @Test func duplicateKeysKeepTheLast() throws {
        #expect(try JSONParser.parse(#"{"a":1,"a":2}"#) == .object([("a", .number("2"))]))
    }

    @Test func integersAreReadOnlyFromExactIntegralNumbers() throws {
        #expect(JSONValue.number("3").intValue == 3)
        #expect(JSONValue.number("3.0").intValue == 3)
        #expect(JSONValue.number("3.5").intValue == nil)
        #expect(JSONValue.double(120.5).compactString == "120.5")
        #expect(JSONValue.double(120).compactString == "120")
    }
}

@Suite struct WireTests {
    static let tab = TabState(info: TabInfo(id: "mail", title: "Mail \"x\"", icon: "envelope", color: "#00FF00", badge: "2"),
                              stack: [Page(id: "p1", route: "root", appeared: true, appearCount: 3), Page(id: "p9", route: "a/b")],
                              scroll: 12.25, values: ["greeting": .string("Tapped"), "n": .number("1.50")])

    static let everyEvent: [Event] = [
        .selected(from: "a", to: "b"), .firstAppear(tab: "a", page: "p1"), .appear(tab: "a", page: "p1"),
        .disappear(tab: "a", page: "p1"), .pushed(tab: "a", page: "p2", route: "next"), .popped(tab: "a", pages: ["p3", "p2"]),
        .scrollToTop(tab: "a", count: 7), .scrolled(tab: "a", offset: 10.5), .valueSet(tab: "a", key: "k", value: .null),
        .valueSet(tab: "a", key: "k", value: .array([.number("1e3"), .object([("x", .bool(true))])])),
        .tabAdded(tab, index: 2), .tabUpdated(tab), .tabMoved(tab: "a", index: 0), .tabRemoved(tab: "a"),
        .clientJoined(ClientInfo(id: "c7", name: "kiosk-1")), .clientLeft("c7"),
    ]

    /// Where an array keeps its elements: equal for arrays that share their storage.
    private func storage(_ bytes: [UInt8]) -> UInt {
        bytes.withUnsafeBufferPointer { UInt(bitPattern: $0.baseAddress) }
    }

    @Test func everyEventKindRoundTrips() throws {
        for (i, event) in Self.everyEvent.enumerated() {
            let e = SequencedEvent(seq: i + 1, event: event)
            let decoded = try SequencedEvent(json: try JSONParser.parse(e.json.compactBytes))
            #expect(decoded == e, "\(event.kind)")
        }
    }

    static let batch = EventBatch(by: "c7", ref: "r12", events: [
        SequencedEvent(seq: 43, event: .selected(from: "home", to: "profile")),
        SequencedEvent(seq: 44, event: .disappear(tab: "home", page: "p9")),
    ])
    /// `batch`'s `events` frame, written out by hand (PROTOCOL.md).
    static let batchFrame =
        #"{"type":"events","by":"c7","ref":"r12","events":[{"seq":43,"kind":"selected","from":"home","to":"profile"},{"seq":44,"kind":"disappear","tab":"home","page":"p9"}]}"#

    @Test func eventsFrameHasTheProtocolShape() throws {
        #expect(ServerFrame.events(Self.batch).json.compactString == Self.batchFrame)
        #expect(ServerFrame.events(Self.batch).bytes == Array(Self.batchFrame.utf8))
        #expect(try ServerFrame(bytes: ServerFrame.events(Self.batch).bytes) == .events(Self.batch))
    }

    @Test func aBatchsFrameIsEncodedOnceAndSharedByItsCopies() throws {
        let batch = Self.batch
        let copy = batch
        let first = batch.frameBytes
        let again = batch.frameBytes
        let fromCopy = copy.frameBytes
        // The cached bytes are the frame: the hand-written text, what the encoder makes, and
        // they decode back to the batch.
        #expect(String(decoding: first, as: UTF8.self) == Self.batchFrame)
        #expect(first == ServerFrame.events(batch).bytes)
        #expect(try ServerFrame(bytes: first) == .events(batch))
        // Asked again, or through a copy, it hands out the same storage: nothing re-encoded.
        #expect(storage(again) == storage(first))
        #expect(storage(fromCopy) == storage(first))
        // An equal batch made separately has its own cache, with equal bytes.
        let twin = EventBatch(by: batch.by, ref: batch.ref, events: batch.events)
        let twinBytes = twin.frameBytes
        #expect(twin == batch)
        #expect(twinBytes == first)
        #expect(storage(twinBytes) != storage(first))
    }

    @Test func aFrameCacheRunsItsEncoderOnceAndKeepsTheFirstBytes() {
        let cache = FrameCache()
        var encodings = 0
        let first = cache.bytes { encodings += 1; return [1, 2, 3] }
        let second = cache.bytes { encodings += 1; return [9] }
        #expect([first, second] == [[1, 2, 3], [1, 2, 3]])
        #expect(encodings == 1)
    }

    @Test func repliesHaveTheProtocolShape() throws {
        #expect(ServerFrame.ack(ref: "r12", seq: 46).json.compactString == #"{"type":"ack","ref":"r12","seq":46}"#)
        #expect(ServerFrame.ack(ref: nil, seq: 1).json.compactString == #"{"type":"ack","ref":null,"seq":1}"#)
        #expect(ServerFrame.error(ref: "r12", .unknownTab("settings")).json.compactString ==
            #"{"type":"error","ref":"r12","code":"unknown_tab","message":"no tab 'settings'"}"#)
        #expect(ServerFrame.pong(ref: "r4").json.compactString == #"{"type":"pong","ref":"r4"}"#)
    }

    @Test func snapshotRoundTripsAndCapsClientsAt100() throws {
        let clients = (1...150).map { ClientInfo(id: "c\($0)", name: "n\($0)") }
        let snap = Snapshot(seq: 42, selected: "mail", scrollToTop: 3, tabs: [Self.tab], clients: clients)
        let decoded = try Snapshot(json: try JSONParser.parse(snap.json.compactBytes))
        #expect(decoded.clientCount == 150)
        #expect(decoded.clients.count == 100)
        #expect(decoded == snap.capped)
        #expect(snap.json["tabs"]?.arrayValue?.first?["values"]?.compactString == #"{"greeting":"Tapped","n":1.50}"#)
    }

    @Test func commandsRoundTripThroughTheirClientFrames() throws {
        let commands: [Command] = [
            .select(tab: "a"), .tap(tab: "a"), .push(tab: nil, route: "r"), .push(tab: "a", route: "r"), .pop(tab: nil),
            .popToRoot(tab: "a"), .scroll(tab: nil, offset: 3.5), .set(tab: "a", key: "k", value: .object([("n", .null)])),
            .addTab(TabInfo(id: "x", title: "X", icon: "star", color: "#000000", badge: "1"), index: 0),
            .updateTab(TabUpdate(id: "x", title: "Y", badge: .some(nil))), .moveTab(tab: "x", index: 1),
            .removeTab(tab: "x"), .sync, .ping,
        ]
        for command in commands {
            let envelope = CommandEnvelope(ref: "r1", command: command)
            #expect(try CommandEnvelope.parse(envelope.json.compactBytes) == envelope)
        }
    }
}
