import Coordinator
import Outbox
import Locking
import WebSockets

/// What leaves one room: each publication of its coordinator, handed to the sockets of the
/// room's channel (the batches' frames, encoded once, the same bytes for every connection,
/// then the answers, with one wake-up), answers to HTTP calls to their responders, answers
/// to other writers' commands to the router's ``PeerAnswers``.
struct RoomOutput: Sendable {
    let room: RoomID
    let channel: ChannelID
    let server: WebSocketServer
    let registry: RoomRegistry
    /// The room's HTTP API (its waiting calls and its budgets).
    let api: RoomAPI.Shared
    let peerAnswers: (any PeerAnswers)?
    let counter: ScrollCounter
    /// With rooms in memory: the outbox this room writes its events to, and its epoch.
    var outbox: (outbox: Outbox, epoch: String)?

    /// Hands one publication out; returns how many HTTP calls it answered.
    func publish(_ batches: [EventBatch], _ answers: [Answer]) -> Int {
        let (metrics, log) = (registry.metrics, registry.log)
        if let last = batches.last { metrics.published(batches, room: room, seq: last.lastSeq, scrollToTop: counter.value) }
        if let (outbox, epoch) = outbox {
            outbox.append(batches.flatMap { OutboxEvent.of($0, room: room, epoch: epoch, kinds: outbox.kinds) })
        }
        var replies: [(ConnectionID, OutgoingFrame)] = []
        replies.reserveCapacity(answers.count)
        var answeredCalls = 0
        for answer in answers {
            if case let .error(_, e) = answer.frame {
                metrics.error(e.code)
                log.info("room '\(room)' client \(answer.client): \(e.code.rawValue): \(e.message)", LogFields(room: room, client: answer.client, code: e.code.rawValue))
            }
            switch AnswerAddress(rawValue: answer.to) {
            case let .apiCall(n):
                api.answer(n, answer.frame)
                answeredCalls += 1
            case let .peer(n):
                peerAnswers?.answer(n, answer.frame)
            case let .connection(connection):
                let frame = OutgoingFrame(answer.frame.bytes)
                switch answer.frame {
                case let .ack(ref?, _), let .error(ref?, _): registry.gateway?.answered(connection, ref: ref)
                default: break
                }
                if case .clients = answer.frame { registry.gateway?.charge(connection, bytes: frame.count) }
                replies.append((connection, frame))
            }
        }
        peerAnswers?.flush()
        server.publish(batches.map { (OutgoingFrame($0.frameBytes), $0.lastSeq) }, on: channel, replies: replies)
        return answeredCalls
    }
}
