import ArgumentParsing
import FoundationEssentials
import Glibc
import Dispatch
import Portable
import TabdClient

/// Runs one subcommand; returns the exit status (see `tabctl --help`).
struct Run {
    let invocation: Invocation
    let output: Output
    /// The system's CAs, and `--ca-file`'s.
    let trust: TLSTrust

    enum Exit {
        static let ok: Int32 = 0
        static let refused: Int32 = 1
        static let usage: Int32 = 2
        static let connection: Int32 = 3
    }

    func main() async -> Int32 {
        do throws(TabdClientError) {
            switch invocation.command!.name {
            case "rooms": return try await rooms()
            case "watch": return try await watch()
            default: return try await command()
            }
        } catch {
            return fail(error)
        }
    }

    private func connect() async throws(TabdClientError) -> TabdClient {
        try await TabdClient.connect(url: invocation.url, room: invocation.room, token: invocation.token,
                                     name: invocation.name ?? "tabctl", options: .init(reconnects: invocation.command?.name == "watch", tls: trust))
    }

    // MARK: One command

    private func command() async throws(TabdClientError) -> Int32 {
        let name = invocation.command!.name
        let command: Command?
        do { command = try buildCommand() } catch {
            printError("\(error)")
            return Exit.usage
        }
        let client = try await connect()
        do {
            switch name {
            case "state":
                print(output.state(await client.state, session: await client.session))
            case "clients":
                guard case let .clients(after, limit) = command! else { preconditionFailure("clients builds .clients") }
                var page = try await client.clients(after: after, limit: invocation.flags.contains("--all") ? Limits.maxClientsPage : limit)
                while true {
                    for line in output.clients(page) { print(line) }
                    guard invocation.flags.contains("--all"), let next = page.next else { break }
                    page = try await client.clients(after: next, limit: Limits.maxClientsPage)
                }
                if let next = page.next, !invocation.flags.contains("--all") {
                    print(output.json ? JSONValue.object([("next", .string(next))]).compactString : "more: tabctl clients --after \(next)")
                }
            case "ping":
                let rtt = try await client.ping()
                let ms = milliseconds(rtt)
                print(output.json ? JSONValue.object([("type", .string("pong")), ("ms", .double(ms))]).compactString
                                  : "pong in \(ms) ms")
            default:
                let seq = try await client.perform(command!)
                print(output.json ? JSONValue.object([("type", .string("ack")), ("seq", .int(seq))]).compactString : "ok, seq \(seq)")
            }
        } catch {
            await client.close()
            // tabctl cancels no task: what a command throws is the client's own error.
            throw (error as? TabdClientError) ?? .connectionLost
        }
        await client.close()
        return Exit.ok
    }

    /// The command of the invocation (nil for `state`, which prints the welcome's snapshot).
    private func buildCommand() throws(UsageError) -> Command? {
        guard let kind = invocation.command!.kind else { return nil }
        if kind == .clients {
            if let limit = invocation.options["--limit"].flatMap({ Int($0) }), !(1...Limits.maxClientsPage).contains(limit) {
                throw UsageError("--limit must be 1 to \(Limits.maxClientsPage)")
            }
            if invocation.flags.contains("--all"), invocation.options["--after"] != nil { throw UsageError("--all and --after exclude each other") }
        }
        return try invocation.protocolCommand(kind)
    }

    // MARK: watch

    private func watch() async throws(TabdClientError) -> Int32 {
        var remaining: Int?
        if let count = invocation.options["--count"] {
            guard let n = Int(count), n > 0 else {
                printError("--count must be a whole number 1 or more, got '\(count)'")
                return Exit.usage
            }
            remaining = n
        }
        let client = try await connect()
        let updates = await client.updates()
        let session = await client.session
        note("connected to room \(session.room) as \(session.client) (\(session.role))")
        let withState = invocation.flags.contains("--state")
        var first = true
        for await update in updates {
            switch update {
            case let .snapshot(s):
                if !first { note("the state was replaced by tabd's at seq \(s.seq): the events before it were not kept for this client") }
                first = false
                // The updates start with the state the events that follow are applied to.
                if withState, !emit(output.state(s, session: await client.session)) {
                    await client.close()
                    return Exit.ok
                }
            case let .events(batch):
                // The client's state already holds the batch: its tabs give the colours
                // (a tab removed in the batch is printed uncoloured).
                let tabs = await client.state.tabs
                for e in batch.events {
                    // The reader went away (`tabctl watch | head -1`): done.
                    guard emit(output.line(e, of: batch, tabs: tabs)) else {
                        await client.close()
                        return Exit.ok
                    }
                    if let r = remaining {
                        remaining = r - 1
                        if r == 1 {
                            await client.close()
                            return Exit.ok
                        }
                    }
                }
            case let .connected(session, resumed):
                note(resumed ? "resumed as \(session.client), missing nothing" : "reconnected as \(session.client); the events in between were no longer kept, the state is tabd's")
            case .caughtUp:
                note("caught up: the events from here on are live")
            case let .disconnected(close):
                note("disconnected: \(close)")
            case let .reconnecting(attempt, delay):
                note("reconnecting (attempt \(attempt)) in \(milliseconds(delay)) ms")
            case let .closed(error):
                await client.close()
                throw error
            }
        }
        await client.close()
        return Exit.ok
    }

    // MARK: rooms

    private func rooms() async throws(TabdClientError) -> Int32 {
        let api = try TabdAPI(url: invocation.url, token: invocation.token, tls: trust)
        let args = invocation.positional
        switch args.first ?? "list" {
        case "list":
            guard args.count <= 1 else { return usage("rooms list takes no argument") }
            let rooms = try await api.allRooms()
            if output.json {
                for r in rooms {
                    print(JSONValue.object([("id", .string(r.id)), ("clients", .int(r.clients)), ("seq", .int(r.seq)),
                                            ("loaded", .bool(r.loaded))]).compactString)
                }
            } else {
                let width = max(4, rooms.map(\.id.count).max() ?? 0)
                print("ROOM".padding(width) + "  CLIENTS      SEQ  LOADED")
                for r in rooms {
                    print(r.id.padding(width) + "  " + String(r.clients).leftPadding(7) + "  " + String(r.seq).leftPadding(7)
                          + "  " + (r.loaded ? "yes" : "no"))
                }
            }
        case "show":
            guard args.count == 2 else { return usage("usage: tabctl rooms show ID") }
            let (epoch, snapshot) = try await api.room(args[1])
            print(output.json
                  ? JSONValue.object([("room", .string(args[1])), ("epoch", .string(epoch)), ("snapshot", snapshot.json(capped: false))]).compactString
                  : output.describe(snapshot, room: args[1], epoch: epoch))
        case "create":
            guard args.count == 2 else { return usage("usage: tabctl rooms create ID") }
            let (epoch, seq) = try await api.createRoom(args[1])
            print(output.json
                  ? JSONValue.object([("room", .string(args[1])), ("epoch", .string(epoch)), ("seq", .int(seq))]).compactString
                  : "created room \(args[1]), epoch \(epoch), seq \(seq)")
        case "delete":
            guard args.count == 2 else { return usage("usage: tabctl rooms delete ID") }
            try await api.deleteRoom(args[1])
            if output.json { print(#"{"deleted":true}"#) } else { print("deleted room \(args[1])") }
        case let other:
            return usage("unknown rooms command '\(other)'; see tabctl rooms --help")
        }
        return Exit.ok
    }

    // MARK: Reporting

    /// Writes one line to stdout at once, unbuffered (a pipe's reader sees each event as it
    /// comes); false when stdout is gone (a closed pipe: SIGPIPE is ignored in this process).
    private func emit(_ line: String) -> Bool {
        var bytes = Array((line + "\n").utf8)[...]
        while !bytes.isEmpty {
            let n = bytes.withUnsafeBytes { write(STDOUT_FILENO, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return false }
            bytes = bytes.dropFirst(n)
        }
        return true
    }

    private func milliseconds(_ d: Duration) -> Double {
        ((Double(d.components.seconds) * 1000 + Double(d.components.attoseconds) / 1e15) * 10).rounded() / 10
    }

    private func usage(_ message: String) -> Int32 {
        printError(message)
        return Exit.usage
    }

    /// Reports `error` (on stdout as JSON with --json, so scripts read one stream) and
    /// gives its exit status.
    private func fail(_ error: TabdClientError) -> Int32 {
        let status: Int32
        let code: String
        switch error {
        case let .refused(e): (status, code) = (Exit.refused, e.code.rawValue)
        case let .api(_, c, _): (status, code) = (Exit.refused, c)
        case .invalidURL: (status, code) = (Exit.usage, "invalid_url")
        case .connectFailed, .connectionLost, .closed, .timedOut, .deadlineExceeded, .protocolViolation: (status, code) = (Exit.connection, "connection")
        }
        if output.json {
            print(JSONValue.object([("type", .string("error")), ("code", .string(code)), ("message", .string(error.description))]).compactString)
        }
        printError(error.description)
        return status
    }

    private func printError(_ message: String) {
        StandardStream.error("tabctl: \(message)\n")
    }

    private func note(_ message: String) {
        StandardStream.error("tabctl: \(message)\n")
    }
}
