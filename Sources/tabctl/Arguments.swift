import ArgumentParsing
import TabdClient
import Portable

/// What `tabctl` was asked to do, read from its arguments and the environment.
struct Invocation {
    var url = "http://127.0.0.1:8080"
    var room: String?
    var token: String?
    var name: String?
    /// `--ca-file`: a CA trusted besides the system's, for https:// and wss://.
    var caFile: String?
    var json = false
    var help = false
    /// `--version`: print the version and the commit, and nothing else.
    var version = false
    /// The subcommand and its positional arguments.
    var command: Subcommand?
    var positional: [String] = []
    /// Options of the subcommand (`--tab`, `--title`, `--count`, ...), by name.
    var options: [String: String] = [:]
    var flags: Set<String> = []
}

/// Every subcommand: its name, what it takes, and its help.
struct Subcommand {
    let name: String
    let usage: String
    let summary: String
    /// Positional arguments: at least `minArgs`, at most `maxArgs`.
    let minArgs: Int
    let maxArgs: Int
    /// Options taking a value, and flags, beyond the global ones.
    var options: [String] = []
    var flags: [String] = []
    var details = ""
    /// The protocol's command this subcommand sends (nil for watch, state and rooms).
    var kind: CommandKind?

    static let all: [Subcommand] = [
        .init(name: "watch", usage: "watch [--state] [--count N]", summary: "follow the room live: one line per event",
              minArgs: 0, maxArgs: 0, options: ["--count"], flags: ["--state"],
              details: """
              Prints every event of the room from now on, one line each: seq, kind and its
              fields, and who caused it. On a terminal tab ids are shown in their tab's
              colour. With --json each line is the event's JSON object with the batch's
              "by" and "ref" added. Reconnects (and resumes, missing nothing) when the
              connection drops; those notices go to stderr.
                --state        first print the room's state (as `state` does), then the
                               events that follow it, with no gap; again whenever tabd
                               replaces the state
                --count N      stop after N events
              """),
        .init(name: "state", usage: "state", summary: "print the room's state", minArgs: 0, maxArgs: 0,
              details: """
              Prints the room's tabs (the selected one marked), each tab's stack, scroll
              offset and values, the scroll-to-top counter and the clients. With --json:
              {"room","epoch","snapshot"}, the snapshot as the protocol sends it.
              """),
    ] + CommandKind.allCases.filter { $0 != .sync }.map(Subcommand.init(kind:)) + [
        .init(name: "rooms", usage: "rooms [list | show ID | create ID | delete ID]",
              summary: "list, show, create or delete rooms (HTTP API)", minArgs: 0, maxArgs: 2,
              details: """
              Uses tabd's HTTP API. With credentials on, it needs an admin token: of every
              room ('*') to list and create, of the room to show or delete it.
                list           every room: id, clients, seq, loaded (the default)
                show ID        the room's epoch and state, like `state`
                create ID      create it with tabd's default tabs
                delete ID      delete it: its clients are closed with 4404
              """),
    ]

    static func named(_ name: String) -> Subcommand? { all.first { $0.name == name } }

    init(name: String, usage: String, summary: String, minArgs: Int, maxArgs: Int,
         options: [String] = [], flags: [String] = [], details: String = "") {
        self.name = name; self.usage = usage; self.summary = summary; self.minArgs = minArgs; self.maxArgs = maxArgs
        self.options = options; self.flags = flags; self.details = details
    }

    /// A command of the protocol, as its declaration has it (``CommandDeclaration``): named
    /// like its kind in kebab case, the required fields (and an object's first) are the positional
    /// arguments, the other fields options, and a field whose null is a value also a
    /// `--no-` flag.
    init(kind: CommandKind) {
        let fields = CommandLineField.all(of: kind)
        let positional = fields.filter(\.isPositional)
        let options = fields.filter { !$0.isPositional }
        let usage = ([kind.commandLineName] + positional.map(\.placeholder) + options.map(\.usage)
            + (Self.extraFlags[kind] ?? []).map { "[\($0)]" }).joined(separator: " ")
        var details = options.flatMap { option in
            [(option.synopsis, option.field.help)] + (option.noFlag.map { [($0, "sends null for \(option.option)")] } ?? [])
        }.map { (synopsis: String, help: String) -> String in "  " + String(synopsis.prefix(15)).padded(to: 15) + help }
        if let extra = Self.extraDetails[kind] { details.insert(extra, at: 0) }
        self.init(name: kind.commandLineName, usage: usage, summary: kind.declaration.summary,
                  minArgs: positional.count, maxArgs: positional.count,
                  options: options.map(\.option), flags: options.compactMap(\.noFlag) + (Self.extraFlags[kind] ?? []),
                  details: details.joined(separator: "\n"))
        self.kind = kind
    }

    /// What tabctl adds to a command's help beyond its fields'.
    static let extraDetails: [CommandKind: String] = [
        .tap: "Like a native tab bar: selects TAB; on the selected tab pops it to its first page; at\nthe first page scrolls it to the top.",
        .set: """
        VALUE is JSON (42, true, null, "text", [1,2], {"a":1}); anything that is not
        JSON is taken as a string, so `set title Hello` stores "Hello".
        """,
        .clients: """
        Prints the room's connected clients in join order, one per line: id and name
        (in a cluster, those connected to the node tabctl reached). tabctl itself is
        one of them. A room of more clients than tabd's --presence-limit only counts
        them in its state; this lists them. With --json each line is {"id","name"},
        and a last line {"next"} when more follow.
          --all          every client, page after page (excludes --after)
        """,
    ]
    static let extraFlags: [CommandKind: [String]] = [.clients: ["--all"]]

    var help: String {
        var text = "USAGE: tabctl [global options] \(usage)\n\n\(summary.prefix(1).uppercased() + summary.dropFirst()).\n"
        if !details.isEmpty { text += "\n\(details)\n" }
        return text + "\n" + Invocation.globalOptions
    }
}

extension Invocation {
    static let globalOptions = """
    GLOBAL OPTIONS:
      --url URL        tabd's address: http://HOST:PORT or ws://HOST:PORT, or
                       https:// and wss:// for a tabd with TLS
                       (default $TABD_URL, else http://127.0.0.1:8080)
      --ca-file FILE   also trust the CA certificates in FILE (PEM) for https://
                       and wss://, besides the system's (default $TABD_CA_FILE)
      --room ID        the room (default $TABD_ROOM, else tabd's 'main')
      --token TOKEN    a token, when tabd requires one (default $TABD_TOKEN)
      --name NAME      the name other clients see (default tabctl)
      --json           machine-readable output: one JSON object per line
      -h, --help       help (tabctl COMMAND --help: help on one command)
      --version        the version and the commit tabctl was built from
    """

    static var help: String {
        // A usage longer than the column has its summary on the next line.
        let width = 36
        let list = Subcommand.all.map { c in
            c.usage.count + 2 <= width ? "  " + c.usage.padded(to: width) + c.summary
                : "  " + c.usage + "\n" + String(repeating: " ", count: width + 2) + c.summary
        }.joined(separator: "\n")
        return """
        tabctl: watch and drive a tabd room from the command line.

        USAGE: tabctl [global options] COMMAND [arguments]

        COMMANDS:
        \(list)

        \(globalOptions)

        EXIT STATUS: 0 done; 1 tabd refused the command (its error code is printed);
        2 usage error; 3 tabd could not be reached or closed the connection (a TLS
        certificate that does not verify included).
        """
    }

    static let globals: Set<String> = ["--url", "--room", "--token", "--name", "--ca-file"]

    /// Reads the arguments; options may come before or after the command.
    static func parse(_ args: [String], environment: [String: String]) throws(UsageError) -> Invocation {
        var inv = Invocation()
        if let url = environment["TABD_URL"], !url.isEmpty { inv.url = url }
        if let room = environment["TABD_ROOM"], !room.isEmpty { inv.room = room }
        if let token = environment["TABD_TOKEN"], !token.isEmpty { inv.token = token }
        if let caFile = environment["TABD_CA_FILE"], !caFile.isEmpty { inv.caFile = caFile }
        var line = Arguments(args)
        var words: [String] = []
        func value(_ name: String) throws(UsageError) -> String { try line.value(of: name) }
        while let arg = line.next() {
            switch arg {
            case "-h", "--help": inv.help = true
            case "--version": inv.version = true
            case "--json": inv.json = true
            case "--url": inv.url = try value(arg)
            case "--room": inv.room = try value(arg)
            case "--token": inv.token = try value(arg)
            case "--name": inv.name = try value(arg)
            case "--ca-file": inv.caFile = try value(arg)
            case "--": words += line.rest()
            default:
                if arg.hasPrefix("--") {
                    guard let command = words.first.flatMap(Subcommand.named) else {
                        throw UsageError("unknown option \(arg)" + (words.isEmpty ? " (options of a command come after it)" : ""))
                    }
                    if command.flags.contains(arg) {
                        inv.flags.insert(arg)
                    } else if command.options.contains(arg) {
                        inv.options[arg] = try value(arg)
                    } else {
                        throw UsageError("'\(command.name)' has no option \(arg); see tabctl \(command.name) --help")
                    }
                } else {
                    words.append(arg)
                }
            }
        }
        guard let name = words.first else {
            if inv.help || inv.version { return inv }
            throw UsageError("no command; see tabctl --help")
        }
        guard let command = Subcommand.named(name) else { throw UsageError("unknown command '\(name)'; see tabctl --help") }
        inv.command = command
        inv.positional = Array(words.dropFirst())
        if inv.help { return inv }
        guard inv.positional.count >= command.minArgs, inv.positional.count <= command.maxArgs else {
            throw UsageError("usage: tabctl \(command.usage)")
        }
        return inv
    }
}
