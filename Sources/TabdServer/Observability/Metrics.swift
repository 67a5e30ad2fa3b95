import Coordinator
import Locking
import Measuring

/// The counters behind `/metrics`, in Prometheus text format.
final class Metrics: Sendable {
    private struct State {
        var clients = 0
        var seq = 0
        var scrollToTop = 0
        var events = 0
        var commands: [String: Int] = Dictionary(uniqueKeysWithValues: Command.allTypes.map { ($0, 0) })
        var errors: [String: Int] = Dictionary(uniqueKeysWithValues: ErrorCode.allCases.map { ($0.rawValue, 0) })
        var slowClientsClosed = 0
        var refused: [Int: Int] = [401: 0, 403: 0]
        var tokensExpired = 0
        var refreshes: [Bool: Int] = [true: 0, false: 0]
        var streams = 0
    }

    private let state = Locked(State())
    /// A command's arrival on its connection to its ack or error going out (commands with a `ref`).
    let commandTimes = Histogram(name: "tabd_command_seconds",
                                 help: "From a command's arrival to its ack or error going out, its commit included (commands with a ref, over WebSocket).")
    /// An upgrade accepted to its welcome going out.
    let welcomeTimes = Histogram(name: "tabd_welcome_seconds", help: "From a WebSocket upgrade accepted to its welcome going out (the room loaded, the join stored).")

    /// `tabd_seq` and `tabd_scroll_to_top_count` are those of room `main`, the room of
    /// clients that know nothing of rooms; the other figures count every room. `seq` and
    /// `scrollToTop` are the room's own, as of its last published batch.
    func published(_ batches: [EventBatch], room: RoomID, seq: Int, scrollToTop: Int) {
        state.withLock { s in
            for batch in batches { s.events += batch.events.count }
            guard room == Limits.defaultRoom else { return }
            s.seq = seq
            s.scrollToTop = scrollToTop
        }
    }

    func command(_ type: String) { state.withLock { $0.commands[type, default: 0] += 1 } }
    func error(_ code: ErrorCode) { state.withLock { $0.errors[code.rawValue, default: 0] += 1 } }
    func clientsChanged(by delta: Int) { state.withLock { $0.clients += delta } }
    /// A reader of an event stream (`/api/rooms/ID/events`, `/api/events`) came, or went.
    func streamOpened() { state.withLock { $0.streams += 1 } }
    func streamClosed() { state.withLock { $0.streams -= 1 } }
    func slowClientClosed() { state.withLock { $0.slowClientsClosed += 1 } }
    /// A request or upgrade refused for its credentials (401) or its rights (403).
    func authRefused(status: Int) { state.withLock { $0.refused[status, default: 0] += 1 } }
    func tokenExpired() { state.withLock { $0.tokensExpired += 1 } }
    /// A `refresh` frame's token taken (`accepted`) or refused.
    func tokenRefreshed(accepted: Bool) { state.withLock { $0.refreshes[accepted, default: 0] += 1 } }

    func render(rooms: (loaded: Int, stored: Int), incompleteRequests: Int, queuedBytes: Int = 0, queuedAnswerBytes: Int = 0,
                droppedAnswers: Int = 0) -> String {
        let s = state.withLock { $0 }
        var out = """
        # HELP tabd_incomplete_requests_total Connections that ended before their request was complete (timed out after 5 s, or dropped).
        # TYPE tabd_incomplete_requests_total counter
        tabd_incomplete_requests_total \(incompleteRequests)
        # HELP tabd_queued_bytes Bytes waiting for clients (each broadcast once; HTTP answers not taken and frames held before a welcome included), bounded by --queue-bytes-total.
        # TYPE tabd_queued_bytes gauge
        tabd_queued_bytes \(queuedBytes)
        # HELP tabd_queued_http_bytes Of tabd_queued_bytes, the HTTP answers held for clients that do not take them.
        # TYPE tabd_queued_http_bytes gauge
        tabd_queued_http_bytes \(queuedAnswerBytes)
        # HELP tabd_http_slow_closed_total HTTP connections closed because, past --queue-bytes-total, they held the largest answers not taken.
        # TYPE tabd_http_slow_closed_total counter
        tabd_http_slow_closed_total \(droppedAnswers)
        # HELP tabd_clients Connected WebSocket clients.
        # TYPE tabd_clients gauge
        tabd_clients \(s.clients)
        # HELP tabd_event_streams Readers of event streams over HTTP (server-sent events); they are not clients.
        # TYPE tabd_event_streams gauge
        tabd_event_streams \(s.streams)
        # HELP tabd_rooms_loaded Rooms held in memory.
        # TYPE tabd_rooms_loaded gauge
        tabd_rooms_loaded \(rooms.loaded)
        # HELP tabd_rooms_stored Rooms that exist (in the state file, or in memory with --state :memory:).
        # TYPE tabd_rooms_stored gauge
        tabd_rooms_stored \(rooms.stored)
        # HELP tabd_seq The last event sequence number of room main.
        # TYPE tabd_seq gauge
        tabd_seq \(s.seq)
        # HELP tabd_scroll_to_top_count The scroll-to-top counter of room main.
        # TYPE tabd_scroll_to_top_count gauge
        tabd_scroll_to_top_count \(s.scrollToTop)
        # HELP tabd_events_total Events published.
        # TYPE tabd_events_total counter
        tabd_events_total \(s.events)
        # HELP tabd_slow_clients_closed_total Connections closed with 1008 because they fell behind.
        # TYPE tabd_slow_clients_closed_total counter
        tabd_slow_clients_closed_total \(s.slowClientsClosed)
        # HELP tabd_tokens_expired_total Connections closed with 4001 because their token ran out.
        # TYPE tabd_tokens_expired_total counter
        tabd_tokens_expired_total \(s.tokensExpired)
        # HELP tabd_token_refreshes_total refresh frames whose token was taken (accepted) or refused (refused).
        # TYPE tabd_token_refreshes_total counter
        tabd_token_refreshes_total{result="accepted"} \(s.refreshes[true] ?? 0)
        tabd_token_refreshes_total{result="refused"} \(s.refreshes[false] ?? 0)
        # HELP tabd_auth_refused_total Upgrades and HTTP requests refused for their credentials (401) or rights (403).
        # TYPE tabd_auth_refused_total counter
        tabd_auth_refused_total{status="401"} \(s.refused[401] ?? 0)
        tabd_auth_refused_total{status="403"} \(s.refused[403] ?? 0)
        # HELP tabd_commands_total Commands received, by type.
        # TYPE tabd_commands_total counter

        """
        for (type, n) in s.commands.sorted(by: { $0.key < $1.key }) { out += "tabd_commands_total{type=\"\(type)\"} \(n)\n" }
        out += "# HELP tabd_errors_total Errors answered, by code.\n# TYPE tabd_errors_total counter\n"
        for (code, n) in s.errors.sorted(by: { $0.key < $1.key }) { out += "tabd_errors_total{code=\"\(code)\"} \(n)\n" }
        return out + commandTimes.text + welcomeTimes.text
    }
}
