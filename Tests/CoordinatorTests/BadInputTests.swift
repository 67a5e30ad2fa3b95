import Testing
@testable import Coordinator
@testable import TabdProtocol

/// Every error code a command can reach, each leaving the state exactly as it was.
@Suite struct BadInputTests {
    static let longString = String(repeating: "x", count: 200)

    @Test(arguments: [
        Command.select(tab: "nope"), .tap(tab: "nope"), .push(tab: "nope", route: "a"), .pop(tab: "nope"),
        .popToRoot(tab: "nope"), .scroll(tab: "nope", offset: 1), .set(tab: "nope", key: "k", value: .int(1)),
        .updateTab(TabUpdate(id: "nope", title: "X")), .moveTab(tab: "nope", index: 0), .removeTab(tab: "nope"),
        // unknown_tab wins over invalid
        .push(tab: "nope", route: ""), .moveTab(tab: "nope", index: 99),
    ])
    func commandsOnAMissingTabAreUnknownTab(command: Command) async throws {
        await expectRefused(try freshCoordinator(), command, .unknownTab)
    }

    @Test(arguments: [
        Command.push(tab: nil, route: ""), .push(tab: nil, route: longString),
        .scroll(tab: nil, offset: -1), .scroll(tab: nil, offset: .infinity), .scroll(tab: nil, offset: .nan),
        .set(tab: nil, key: "", value: .int(1)), .set(tab: nil, key: String(repeating: "k", count: 65), value: .int(1)),
        .set(tab: nil, key: "big", value: .string(String(repeating: "v", count: 4095))),
        .addTab(TabInfo(id: "home", title: "Dup", icon: "house", color: "#000000"), index: nil),
        .addTab(TabInfo(id: "Bad Id", title: "T", icon: "house", color: "#000000"), index: nil),
        .addTab(TabInfo(id: String(repeating: "a", count: 33), title: "T", icon: "house", color: "#000000"), index: nil),
        .addTab(TabInfo(id: "t", title: "", icon: "house", color: "#000000"), index: nil),
        .addTab(TabInfo(id: "t", title: longString, icon: "house", color: "#000000"), index: nil),
        .addTab(TabInfo(id: "t", title: "T", icon: "House!", color: "#000000"), index: nil),
        .addTab(TabInfo(id: "t", title: "T", icon: "house", color: "red"), index: nil),
        .addTab(TabInfo(id: "t", title: "T", icon: "house", color: "#12345G"), index: nil),
        .addTab(TabInfo(id: "t", title: "T", icon: "house", color: "#000000", badge: ""), index: nil),
        .addTab(TabInfo(id: "t", title: "T", icon: "house", color: "#000000", badge: "123456789"), index: nil),
        .addTab(TabInfo(id: "t", title: "T", icon: "house", color: "#000000"), index: 4),
        .addTab(TabInfo(id: "t", title: "T", icon: "house", color: "#000000"), index: -1),
        .updateTab(TabUpdate(id: "home", title: "")), .updateTab(TabUpdate(id: "home", icon: "")),
        .updateTab(TabUpdate(id: "home", color: "#FFF")), .updateTab(TabUpdate(id: "home", badge: .some(""))),
        .moveTab(tab: "home", index: 3), .moveTab(tab: "home", index: -1),
    ])
    func valuesPastTheLimitsAreInvalid(command: Command) async throws {
        await expectRefused(try freshCoordinator(), command, .invalid)
    }

    @Test func valueLimitCountsCompactUTF8Bytes() async throws {
        let c = try freshCoordinator()
        // 4,094 characters plus two quotes: exactly 4,096 bytes is allowed.
        try await run(c, .set(tab: nil, key: "fits", value: .string(String(repeating: "v", count: 4094))))
        // "é" is two bytes in UTF-8.
        await expectRefused(c, .set(tab: nil, key: "big", value: .string(String(repeating: "é", count: 2048))), .invalid)
    }

    @Test func atMost256KeysPerTabCountingOnlyNewKeys() async throws {
        let c = try freshCoordinator()
        for i in 0..<256 { try await run(c, .set(tab: "home", key: "k\(i)", value: .int(i))) }
        await expectRefused(c, .set(tab: "home", key: "one-more", value: .int(0)), .invalid)
        try await run(c, .set(tab: "home", key: "k0", value: .string("replaced")))
        try await run(c, .set(tab: "home", key: "one-more", value: .null))
        try await run(c, .set(tab: "favorites", key: "other-tab", value: .bool(true)))
    }

    @Test func stackDepthIsAtMost64() async throws {
        let c = try freshCoordinator()
        for i in 1..<64 { try await run(c, .push(tab: "profile", route: "r\(i)")) }
        await expectRefused(c, .push(tab: "profile", route: "too-deep"), .invalid)
        // The refused push did not use up a page id.
        let next = try await run(c, .push(tab: "home", route: "ok"))
        #expect(next?.events.first?.event == .pushed(tab: "home", page: "p67", route: "ok"))
    }

    @Test func atMost32Tabs() async throws {
        let c = try freshCoordinator()
        for i in 3..<32 { try await run(c, .addTab(TabInfo(id: "t\(i)", title: "T", icon: "star", color: "#000000"), index: nil)) }
        await expectRefused(c, .addTab(TabInfo(id: "t32", title: "T", icon: "star", color: "#000000"), index: nil), .invalid)
    }

    @Test func lengthsCountUnicodeScalars() async throws {
        let c = try freshCoordinator()
        // 64 scalars of 4 UTF-8 bytes each is a valid title.
        try await run(c, .updateTab(TabUpdate(id: "home", title: String(repeating: "🏠", count: 64))))
        await expectRefused(c, .updateTab(TabUpdate(id: "home", title: String(repeating: "🏠", count: 65))), .invalid)
    }

    // MARK: Frames that never reach the coordinator

    @Test(arguments: ["", "nope", "[1,2]", "\"text\"", "42", "{\"type\":\"select\"", "{\"a\":1}}", "{'type':'ping'}"])
    func framesThatAreNotJSONObjectsAreBadJSON(text: String) {
        do {
            _ = try CommandEnvelope.parse(Array(text.utf8))
            Issue.record("accepted")
        } catch {
            #expect(error.error.code == .badJSON)
            #expect(error.ref == nil)
        }
    }

    @Test(arguments: [
        (#"{"ref":"r1"}"#, "r1"),
        (#"{"type":"launch","ref":"r1"}"#, "r1"),
        (#"{"type":7}"#, nil),
        (#"{"type":"select","ref":"r2"}"#, "r2"),
        (#"{"type":"select","tab":3,"ref":"r3"}"#, "r3"),
        (#"{"type":"push","route":null}"#, nil),
        (#"{"type":"push","route":["a"]}"#, nil),
        (#"{"type":"scroll","offset":"10"}"#, nil),
        (#"{"type":"set","key":"k"}"#, nil),
        (#"{"type":"addTab","tab":{"id":"x","title":"X","icon":"star"}}"#, nil),
        (#"{"type":"addTab","tab":"x"}"#, nil),
        (##"{"type":"addTab","tab":{"id":"x","title":"X","icon":"star","color":"#000000"},"index":1.5}"##, nil),
        (#"{"type":"updateTab","tab":{"id":"home","badge":5}}"#, nil),
        (#"{"type":"moveTab","tab":"home"}"#, nil),
        (#"{"type":"ping","ref":5}"#, nil),
        ("{\"type\":\"launch\",\"ref\":\"" + String(repeating: "r", count: 65) + "\"}", nil),
    ] as [(String, String?)])
    func wrongShapesAreBadCommand(text: String, ref: String?) {
        do {
            let parsed = try CommandEnvelope.parse(Array(text.utf8))
            Issue.record("parsed \(parsed)")
        } catch {
            #expect(error.error.code == .badCommand, "\(error.error.message)")
            #expect(error.ref == ref)
        }
    }

    @Test func aRefOver64CharactersIsInvalidWithNullRef() {
        let long = String(repeating: "r", count: 65)
        do {
            _ = try CommandEnvelope.parse(Array(#"{"type":"ping","ref":"\#(long)"}"#.utf8))
            Issue.record("accepted")
        } catch {
            #expect(error == RejectedFrame(ref: nil, error: .invalid("'ref' is longer than 64 characters")))
        }
    }

    @Test func nullOptionalFieldsCountAsAbsent() throws {
        let e = try CommandEnvelope.parse(Array(#"{"type":"push","tab":null,"route":"a","ref":null}"#.utf8))
        #expect(e == CommandEnvelope(ref: nil, command: .push(tab: nil, route: "a")))
        let u = try CommandEnvelope.parse(Array(#"{"type":"updateTab","tab":{"id":"h","title":null,"badge":null}}"#.utf8))
        #expect(u.command == .updateTab(TabUpdate(id: "h", badge: .some(nil))))
    }

    @Test func hugeIntegerIndexIsAnOutOfRangeValueNotACrash() async throws {
        let e = try CommandEnvelope.parse(Array(#"{"type":"moveTab","tab":"home","index":1e300}"#.utf8))
        await expectRefused(try freshCoordinator(), e.command, .invalid)
    }
}
