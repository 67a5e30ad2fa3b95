import ArgumentParsing
import Foundation
import WebSocketsClient

/// The kind of server tabbench talks to.
enum ServerKind: String, Sendable {
    /// tabd: `set` commands from the senders, an `events` frame to every client, acks.
    case tabd
    /// libwebsockets-test-server's lws-mirror-protocol: every message goes to every client.
    case mirror
    /// Any server that sends every message it receives to every client (bench/broadcast_server.py).
    case broadcast
}

struct BenchOptions: Sendable {
    var server = ServerKind.tabd
    var url: WebSocketURL?
    /// Every `--url` given: client i connects to the (i mod n)th (a cluster's nodes).
    var urls: [WebSocketURL] = []
    var subprotocol: String?
    var clients = 100
    var senders = 1
    /// Whether `--senders` was given (with `--rooms`, the default is one sender per active room).
    var sendersGiven = false
    /// `--rooms K`: clients spread over rooms `bench-0…bench-(K-1)`; nil: no `room` parameter
    /// (tabd's room `main`), one room for every client.
    var rooms: Int?
    var activeRooms: Int?
    /// Which room each client joins and who sends (set by `parse`).
    var layout = RoomLayout(clients: 100, rooms: 1, activeRooms: 1, senders: 1)!
    var connectOnly = false
    var roomSteps: [Int]?
    var roomCommands = 0
    var unload = false
    var httpConcurrency = 8
    var window = 16
    var rate: Double?
    var duration = 5.0
    var warmup = 1.0
    var messageBytes = 150
    var connectConcurrency = 200
    /// The client's event loop (`--event-loop`).
    var eventLoop = WebSocketEventLoop.libuv
    /// `--spread K`: client i connects to 127.0.0.(1 + i mod K) instead of 127.0.0.1.
    var spread = 1
    /// `--ca-file`: whom wss:// connections trust besides the system's store.
    var tls = TLSTrust.system

    /// The address client `i` connects to. Linux gives `connect()` the even ports of its
    /// ephemeral range first (about 14,000 of them); once they are taken by connections to one
    /// server address, every further connect scans them all. Connections to another address
    /// may reuse them, so a load client of more than 14,000 connections spreads over a few
    /// loopback addresses of a server that listens on all of them (`--host 0.0.0.0`).
    func spread(_ url: WebSocketURL, client i: Int) -> WebSocketURL {
        guard spread > 1, url.host == "127.0.0.1" else { return url }
        var spreadURL = url
        spreadURL.host = "127.0.0.\(1 + i % min(spread, 254))"
        return spreadURL
    }
    /// Seconds connecting may take; nil: 60 + 1 s per 100 clients.
    var connectTimeout: Double?
    var pid: Int32?
    var check = true
    var json: String?
    var label: String?
    var idleSteps: [Int]?
    var hold = 0.0
    var settle = 1.0
    var quiet = false
    /// `--resume SEQ --epoch E`: every client asks to resume after SEQ of history E (a
    /// restart's reconnect storm).
    var resume: (seq: Int, epoch: String)?
    /// `--churn R`: R joins and R leaves a second, for `--duration` seconds (no load).
    var churn: Double?
    /// `--waves N`: churn waves of `--clients` clients that connect, are welcomed and leave
    /// (memory left behind per connection); `--warmup-waves` of them before "before".
    var waves: Int?
    var warmupWaves = 1
    /// Whether `--duration` was given (with `--waves`: run waves until it has passed).
    var durationGiven = false

    static let help = """
    tabbench: many WebSocket clients against one server; measures fan-out and checks every stream.

    USAGE: tabbench [options]              load run (default)
           tabbench --idle-steps 0,1000,…  memory per idle connection
           tabbench --connect-only         a connect storm: time until every client is welcomed
           tabbench --room-steps 0,1000,…  memory per room (rooms made over tabd's HTTP API)
           tabbench --waves N              memory left behind by connections that come and go
           tabbench inprocess [options]    Coordinator and encoding costs, no sockets

    TARGET
      --server KIND            tabd (default), mirror (libwebsockets-test-server's
                               lws-mirror-protocol) or broadcast (a server that sends every
                               message to every client, e.g. bench/broadcast_server.py)
      --url URL                ws://HOST:PORT/PATH or wss:// (tabd: ws://127.0.0.1:PORT/ws; repeat it
                               for a cluster's nodes: client i uses the (i mod n)th;
                               mirror: ws://127.0.0.1:PORT/?mirror=bench)
      --ca-file FILE           trust the CA certificates in FILE for wss:// (besides the
                               system's store)
      --subprotocol NAME       subprotocol offered (default: tabd.v1 for tabd,
                               lws-mirror-protocol for mirror, none for broadcast)
      --pid PID                the server's process: its RSS (/proc/PID/status) before and
                               after, and its CPU time per delivery (/proc/PID/stat)

    LOAD
      --clients N              connections, all receiving (default 100)
      --senders M              how many of them send (default 1), in turn
      --window W               closed loop: W messages in flight (default 16); a message is
                               done when the last client has received it
      --rate R                 open loop instead: R messages per second over all senders,
                               evenly spaced; latency counts from the scheduled send time
      --duration S             measured seconds (default 5)
      --warmup S               seconds of load before measuring (default 1)
      --message-bytes B        size of each broadcast frame's payload (default 150); for
                               tabd, the `set` value is padded so that its events frame has
                               about this size
      --connect-concurrency K  handshakes in flight while connecting (default 200)
      --event-loop LOOP        the client's loop: libuv (default) or poll (libwebsockets' own)
      --spread K               for a server on 127.0.0.1 that listens on every address (tabd
                               --host 0.0.0.0): connect to 127.0.0.1 … 127.0.0.K in turn
                               (Linux runs short of cheap ephemeral ports past about 14,000
                               connections to one address)
      --connect-timeout S      seconds until every client must be welcomed (default 60 + 1
                               per 100 clients)
      --resume SEQ --epoch E   tabd: every client asks to resume after SEQ of history E
                               (as clients reconnecting after a restart do); a resumed
                               welcome counts as welcomed
      --churn R                tabd: R clients join and R leave every second for --duration
                               seconds, about R connected at a time (no load; run it beside
                               a load run into the same room)

    ROOMS (tabd)
      --rooms K                spread the clients evenly over K rooms bench-0…bench-(K-1)
                               (client i joins room i mod K, ?room=bench-…); without it
                               the clients name no room: all are in tabd's room main
      --active-rooms A         only the first A rooms get senders (default: all K); the others
                               stay connected and idle
      --senders M              with --rooms: senders over all active rooms, a multiple of A
                               (default A: one per active room); consecutive messages go to
                               different rooms. A message is done when every client of its
                               room has received it; the stream checks hold per room
      --connect-only           connect every client, report the time until all are welcomed
                               (and until every room's presence has settled), keep them
                               --hold seconds, check they stay, and stop: no load
      --room-steps LIST        memory per room: create rooms bench-0… over the HTTP API
                               (PUT /api/rooms/ID) up to each count in LIST, read the
                               server's RSS at each step (needs --pid) and report the slope
      --room-commands C        with --room-steps: C `set` commands to each new room
                               (POST /api/rooms/ID/commands) (default 0)
      --unload                 with --room-steps: at each step, wait until tabd_rooms_loaded
                               (GET /metrics) is 0 before reading RSS (tabd with a short
                               --room-idle): memory per stored, unloaded room
      --http-concurrency K     HTTP requests in flight with --room-steps (default 8)

    MEMORY
      --waves N                churn waves (needs --pid): --clients clients over --rooms
                               rooms connect (--connect-concurrency at a time), are welcomed
                               and leave at once (half with a close frame, half by dropping
                               the connection); after each wave, wait until tabd's
                               tabd_clients (/metrics) is 0 and read its RSS. Reports RSS
                               growth per connection that came and went after the warm-up.
                               With --duration S: waves until S seconds have passed
      --warmup-waves W         waves before "before" (default 1: the first fills tabd's pools)
      --idle-steps LIST        connect idle clients up to each count in LIST (e.g.
                               0,1000,2000,3000,4000,5000), read the server's RSS at each step
                               (needs --pid) and report the slope: memory per idle connection
      --settle S               seconds to wait at each step before reading RSS (default 1)
      --hold S                 keep the connections S seconds more and check they all stay

    OUTPUT
      --no-check               skip the stream checks (on by default: every client gets the
                               same frames in the same order, tabd seqs gap-free, the lifecycle
                               invariants of SEMANTICS.md hold, and the replay equals `sync`)
      --json PATH              also write the summary as JSON
      --label TEXT             a name for this run in the output
      --quiet                  only the summary
      -h, --help               this help

    Deliveries are frames received by clients, summed over clients: one message to N clients
    is N deliveries. Latency is from sending a message (or command) to the moment the last of
    the N clients received it.
    """

    static let inprocessHelp = """
    tabbench inprocess: what the Coordinator and the encoder cost, without sockets.

    USAGE: tabbench inprocess [--commands N] [--json PATH]

      --commands N   commands per measurement (default 20000)
      --json PATH    also write the results as JSON

    Reports Coordinator commands per second with 1 and with 8 concurrent callers (set
    commands, then a random mix of every kind), and the time to encode one events frame
    (ServerFrame.events(...).bytes and its OutgoingFrame) for a 1-event and a 4-event batch.
    """

    static func parse(_ args: [String]) throws -> BenchOptions {
        var o = BenchOptions()
        var line = Arguments(args)
        func value(_ name: String) throws(UsageError) -> String { try line.value(of: name) }
        func int(_ name: String, min: Int) throws(UsageError) -> Int { try line.int(of: name, min: min) }
        func double(_ name: String, min: Double) throws(UsageError) -> Double { try line.double(of: name, min: min) }
        func counts(_ name: String) throws -> [Int] {
            let v = try value(name)
            let steps = v.split(separator: ",").map { Int($0.trimmingCharacters(in: .whitespaces)) }
            guard !steps.isEmpty, steps.allSatisfy({ ($0 ?? -1) >= 0 }) else {
                throw UsageError("\(name) must be counts like 0,1000,2000, got '\(v)'")
            }
            return steps.map { $0! }.sorted()
        }
        while let arg = line.next() {
            switch arg {
            case "-h", "--help": throw UsageError(help, exitCode: 0)
            case "--server":
                let v = try value(arg)
                guard let kind = ServerKind(rawValue: v) else { throw UsageError("--server must be tabd, mirror or broadcast, got '\(v)'") }
                o.server = kind
            case "--url":
                let v = try value(arg)
                guard let url = WebSocketURL(v) else { throw UsageError("--url must be ws:// or wss://HOST:PORT/PATH, got '\(v)'") }
                if o.url == nil { o.url = url }
                o.urls.append(url)
            case "--subprotocol": o.subprotocol = try value(arg)
            case "--clients": o.clients = try int(arg, min: 1)
            case "--senders":
                o.senders = try int(arg, min: 1)
                o.sendersGiven = true
            case "--rooms": o.rooms = try int(arg, min: 1)
            case "--active-rooms": o.activeRooms = try int(arg, min: 1)
            case "--connect-only": o.connectOnly = true
            case "--room-commands": o.roomCommands = try int(arg, min: 0)
            case "--unload": o.unload = true
            case "--http-concurrency": o.httpConcurrency = try int(arg, min: 1)
            case "--room-steps":
                o.roomSteps = try counts(arg)
            case "--window": o.window = try int(arg, min: 1)
            case "--rate": o.rate = try double(arg, min: 0.001)
            case "--duration":
                o.duration = try double(arg, min: 0.1)
                o.durationGiven = true
            case "--warmup": o.warmup = try double(arg, min: 0)
            case "--message-bytes": o.messageBytes = try int(arg, min: 100)
            case "--connect-concurrency": o.connectConcurrency = try int(arg, min: 1)
            case "--spread": o.spread = try int(arg, min: 1)
            case "--ca-file":
                let v = try value(arg)
                do { o.tls = try TLSTrust(caFile: v) } catch { throw UsageError("--ca-file: \(error)") }
            case "--event-loop":
                let v = try value(arg)
                guard let loop = WebSocketEventLoop(rawValue: v) else { throw UsageError("--event-loop must be libuv or poll, got '\(v)'") }
                o.eventLoop = loop
            case "--connect-timeout": o.connectTimeout = try double(arg, min: 1)
            case "--pid": o.pid = Int32(try int(arg, min: 1))
            case "--no-check": o.check = false
            case "--check": o.check = true
            case "--json": o.json = try value(arg)
            case "--label": o.label = try value(arg)
            case "--quiet": o.quiet = true
            case "--settle": o.settle = try double(arg, min: 0)
            case "--hold": o.hold = try double(arg, min: 0)
            case "--idle-steps": o.idleSteps = try counts(arg)
            case "--resume": o.resume = (try int(arg, min: 0), o.resume?.epoch ?? "")
            case "--epoch": o.resume = (o.resume?.seq ?? -1, try value(arg))
            case "--churn": o.churn = try double(arg, min: 1)
            case "--waves": o.waves = try int(arg, min: 1)
            case "--warmup-waves": o.warmupWaves = try int(arg, min: 0)
            default: throw UsageError("unknown option '\(arg)'")
            }
        }
        guard o.url != nil else { throw UsageError("--url is required") }
        if let resume = o.resume, resume.seq < 0 || resume.epoch.isEmpty { throw UsageError("--resume and --epoch go together") }
        if o.idleSteps == nil && o.roomSteps == nil {
            guard o.senders <= o.clients else { throw UsageError("--senders must not exceed --clients") }
        }
        if (o.rooms != nil || o.roomSteps != nil) && o.server != .tabd {
            throw UsageError("--rooms and --room-steps need --server tabd")
        }
        if o.waves != nil && o.pid == nil { throw UsageError("--waves needs --pid (the server whose memory is measured)") }
        if o.roomSteps != nil && o.pid == nil { throw UsageError("--room-steps needs --pid (the server whose memory is measured)") }
        let rooms = o.rooms ?? 1
        let active = o.activeRooms ?? rooms
        if o.rooms != nil && !o.sendersGiven { o.senders = active }
        let clients = o.idleSteps.map { max($0.last ?? 0, rooms) } ?? o.clients
        guard let layout = RoomLayout(clients: clients, rooms: rooms, activeRooms: active,
                                      senders: o.idleSteps == nil ? o.senders : active) else {
            throw UsageError("--rooms \(rooms), --active-rooms \(active), --senders \(o.senders) and --clients \(clients) do not fit: "
                             + "at least one client per room, at most --rooms active rooms, senders a multiple of the "
                             + "active rooms and no more senders in a room than it has clients")
        }
        o.layout = layout
        if o.subprotocol == nil {
            switch o.server {
            case .tabd: o.subprotocol = "tabd.v1"
            case .mirror: o.subprotocol = "lws-mirror-protocol"
            case .broadcast: o.subprotocol = nil
            }
        }
        return o
    }

    var loopDescription: String {
        if let rate { return "open loop \(Self.number(rate)) msg/s" }
        return "closed loop, window \(window)"
    }

    static func number(_ d: Double) -> String {
        d == d.rounded() && abs(d) < 1e15 ? String(Int(d)) : String(format: "%.2f", d)
    }
}
