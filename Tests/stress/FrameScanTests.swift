import Coordinator
import TabdLoad
import Testing

/// The load client's fast frame reading agrees with the real parser.
struct FrameScanTests {
    private func scan<T>(_ text: String, _ body: (UnsafeRawBufferPointer) -> T) -> T {
        Array(text.utf8).withUnsafeBytes(body)
    }

    @Test func readsTabdFrames() {
        let batch = EventBatch(by: "c12", ref: "r345", events: [
            SequencedEvent(seq: 43, event: .selected(from: "home", to: "profile")),
            SequencedEvent(seq: 44, event: .disappear(tab: "home", page: "p9")),
            SequencedEvent(seq: 45, event: .valueSet(tab: "home", key: "k", value: .string("{\"seq\":1}"))),
        ])
        let text = String(decoding: ServerFrame.events(batch).bytes, as: UTF8.self)
        scan(text) { b in
            #expect(FrameScan.kind(b) == .events)
            #expect(FrameScan.refNumber(b) == 345)
            #expect(FrameScan.firstSeq(b) == 43)
            #expect(FrameScan.seqRange(b)?.first == 43)
            #expect(FrameScan.seqRange(b)?.last == 45)
        }
        let one = String(decoding: ServerFrame.events(EventBatch(by: "tabd", ref: nil, events: [
            SequencedEvent(seq: 7, event: .clientLeft("c1"))])).bytes, as: UTF8.self)
        scan(one) { b in
            #expect(FrameScan.refNumber(b) == nil)
            #expect(FrameScan.seqRange(b)?.first == 7 && FrameScan.seqRange(b)?.last == 7)
            #expect(FrameScan.lastSeq(b) == 7)
        }
        for (frame, kind) in [(ServerFrame.ack(ref: "r1", seq: 3), FrameScan.Kind.ack), (.pong(ref: nil), .pong),
                              (.error(ref: nil, CommandError(.invalid, "x")), .error),
                              (.clients(ref: "r2", node: nil, ClientPage(clients: [], next: nil)), .clients)] {
            scan(String(decoding: frame.bytes, as: UTF8.self)) { #expect(FrameScan.kind($0) == kind) }
        }
        scan("{\"other\":1}") { #expect(FrameScan.kind($0) == .other) }
    }

    @Test func digestsTellFramesApart() {
        let a = scan("{\"type\":\"events\",\"x\":1}") { FrameScan.digest($0) }
        let b = scan("{\"type\":\"events\",\"x\":2}") { FrameScan.digest($0) }
        let a2 = scan("{\"type\":\"events\",\"x\":1}") { FrameScan.digest($0) }
        #expect(a != b && a == a2)
        #expect(FrameScan.chain(FrameScan.chain(0, a), b) != FrameScan.chain(FrameScan.chain(0, b), a))
    }
}
