import Outbox
import TabdProtocol
import Testing

@testable import TabdServer

/// The outbox's bound and a webhook's plan: which event goes next, in order per room, and
/// how far the delivery has come (what a restart goes on after).
@Suite struct DeliveryPlanTests {
    static func event(_ room: String, _ seq: Int) -> OutboxEvent {
        OutboxEvent(type: "clientJoined", room: room, epoch: "0123456789abcdef", seq: seq, fields: [("client", .object([("id", .string("c\(seq)"))]))])
    }

    static func position(_ job: DeliveryPlan.Job?) -> Int? {
        if case let .event(entry)? = job { entry.position } else { nil }
    }

    @Test func aRoomsNextEventWaitsForItsPreviousWhileOtherRoomsGoOn() {
        let outbox = Outbox(id: "0123456789abcdef", limit: 1 << 20, kinds: .default)
        outbox.append([Self.event("a", 1), Self.event("a", 2), Self.event("b", 1), Self.event("a", 3), Self.event("b", 2)])
        var plan = DeliveryPlan(cursor: 0)
        let first = plan.next(from: outbox)
        let second = plan.next(from: outbox)
        #expect(Self.position(first) == 1, "room a's first")
        #expect(Self.position(second) == 3, "room b's first: room a is busy")
        #expect(plan.next(from: outbox) == nil, "both rooms busy")
        plan.delivered(second!)
        #expect(plan.cursor == 0, "position 1 is not delivered yet: a restart starts from it")
        let third = plan.next(from: outbox)
        #expect(Self.position(third) == 5, "room b's second")
        plan.delivered(first!)
        #expect(plan.cursor == 1)
        #expect(Self.position(plan.next(from: outbox)) == 2, "room a's second, once its first is delivered")
        plan.delivered(third!)
        #expect(plan.cursor == 1, "2 is on its way: 3 and 5 wait behind it")
    }

    @Test func theCursorIsTheLastPositionUpToWhichEverythingWasDelivered() {
        let outbox = Outbox(id: "0123456789abcdef", limit: 1 << 20, kinds: .default)
        outbox.append((1...6).map { Self.event("r\($0)", 1) })
        var plan = DeliveryPlan(cursor: 0)
        let jobs = (0..<6).compactMap { _ in plan.next(from: outbox) }
        #expect(jobs.count == 6)
        for n in [5, 3, 1, 0, 4] { plan.delivered(jobs[n]) }
        #expect(plan.cursor == 2, "1 and 2 delivered in a row; 3 is missing")
        plan.delivered(jobs[2])
        #expect(plan.cursor == 6)
    }

    @Test func aPlanStartsAfterItsCursor() {
        let outbox = Outbox(id: "0123456789abcdef", limit: 1 << 20, kinds: .default)
        outbox.append((1...4).map { Self.event("r", $0) })
        var plan = DeliveryPlan(cursor: 2)
        #expect(Self.position(plan.next(from: outbox)) == 3)
    }

    @Test func whatTheOutboxDroppedIsToldAsOneGapBeforeWhatFollows() throws {
        let outbox = Outbox(id: "0123456789abcdef", limit: 1_000, kinds: .default)
        outbox.append((1...50).map { Self.event("r\($0 % 3)", $0) })
        let kept = outbox.figures
        #expect(kept.bytes <= 1_000 && kept.dropped > 0 && kept.first == kept.dropped + 1)
        var plan = DeliveryPlan(cursor: 0)
        let gap = plan.next(from: outbox)
        #expect(gap == .gap(1...kept.dropped))
        plan.delivered(try #require(gap))
        #expect(plan.cursor == kept.dropped)
        #expect(Self.position(plan.next(from: outbox)) == kept.dropped + 1)
    }

    @Test func eventsReadAheadForABusyRoomAndDroppedMeanwhileAreToldNotLost() throws {
        let outbox = Outbox(id: "0123456789abcdef", limit: 2_000, kinds: .default)
        outbox.append((1...5).map { Self.event("busy", $0) })
        var plan = DeliveryPlan(cursor: 0, readAhead: 16)
        let first = plan.next(from: outbox)
        let held = try #require(first) // position 1, on its way (being retried)
        #expect(plan.next(from: outbox) == nil, "2 to 5 wait behind it")
        outbox.append((6...60).map { Self.event("other", $0) }) // pushes 1 to 5 and more out
        let firstKept = outbox.firstKept
        #expect(firstKept > 6)
        let next = plan.next(from: outbox)
        let gap = try #require(next)
        #expect(gap == .gap(2...(firstKept - 1)), "the waiting ones and those never read: one gap")
        plan.delivered(gap)
        #expect(plan.cursor == 0, "1 is still on its way")
        plan.delivered(held)
        #expect(plan.cursor == firstKept - 1)
    }

    @Test func theOutboxNeverDropsItsNewestEventAndCountsWhatItDrops() {
        let outbox = Outbox(id: "0123456789abcdef", limit: 100, kinds: .default)
        let big = OutboxEvent(type: "batch", room: "r", epoch: "0123456789abcdef", seq: 1, fields: [("events", .string(String(repeating: "x", count: 500)))])
        outbox.append([big, big, big])
        let f = outbox.figures
        #expect(f.count == 1 && f.last == 3 && f.first == 3 && f.dropped == 2)
        let read = outbox.read(after: 0)
        #expect(read.gap == 1...2 && read.entries.map(\.position) == [3])
        #expect(outbox.read(after: 3).entries.isEmpty && outbox.read(after: 3).gap == nil)
    }

    @Test func aWebhookTargetTakesHTTPAndHTTPSAndRefusesTheRest() throws {
        let plain = try WebhookTarget("http://127.0.0.1:9000/hook?key=s3cret")
        #expect(plain.host == "127.0.0.1" && plain.port == 9000 && plain.target == "/hook?key=s3cret" && !plain.https)
        #expect(plain.shown == "http://127.0.0.1:9000/hook?…")
        let secure = try WebhookTarget("https://[::1]/")
        #expect(secure.host == "::1" && secure.port == 443 && secure.https && secure.target == "/")
        for bad in ["ftp://x/", "http:///nohost", "https://user:pw@x/", "x", "http://x/#f", "http://x:0/"] {
            #expect(throws: WebhookTarget.Invalid.self, "\(bad)") { try WebhookTarget(bad) }
        }
    }
}
