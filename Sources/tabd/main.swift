import Dispatch
import FoundationEssentials
import Glibc
import Portable
import TabdServer

// tabd: the daemon's wiring. Everything it does is in the TabdServer library; this file
// parses the command line, catches signals, and turns the outcome into exit codes.

let arguments = Array(CommandLine.arguments.dropFirst())
let environment = ProcessInfo.processInfo.environment

/// Prints `text` to stdout for a success, to stderr otherwise, and exits with `code`.
func finish(_ text: String, code: Int32) -> Never {
    if code == 0 { print(text) } else { StandardStream.error((text + "\n")) }
    exit(code)
}

if arguments.first == "token" {
    let (text, code) = TokenCommand.run(Array(arguments.dropFirst()), environment: environment)
    finish(text, code: code)
}

let options: Options
switch Options.parse(arguments, environment: environment) {
case let .run(o): options = o
case let .exit(text, code): finish(text, code: code)
}

let log = Log(level: options.logLevel, format: options.logFormat)
// Caught from here on: a signal while tabd starts is kept, not lost and not fatal.
let termination = TerminationSignals()
// A file-size limit (ulimit -f) must fail a write with an error, not kill the daemon.
signal(SIGXFSZ, SIG_IGN)

let daemon: Daemon
do { daemon = try await Daemon.start(options, log: log) } catch {
    log.error(error.description, LogFields(kind: "start"))
    exit(1)
}
termination.onHangup { daemon.reload() }
// A node its engine refused for good, or a tabd whose state file failed to sync, stops as a
// refused start does (status 1), so that its supervisor starts it again (with the
// credentials of its files; on what the disk really holds).
daemon.onFailure { reason in
    log.error("\(reason); stopping", LogFields(kind: "engine"))
    termination.mailbox.deliver(TerminationSignals.failure)
}
// The first line on stdout, written unbuffered: scripts wait for it.
StandardStream.output("tabd listening on \(daemon.url)\n")

let received = await termination.mailbox.wait()
let status: Int32 = received == TerminationSignals.failure ? 1 : 0
if status == 0 { log.info("received signal \(received), stopping: closing every client with 1001") }
// A stop takes at most 5 s, whatever the load: clients get 3 s to take their 1001 (then the
// rest are dropped), rooms the time left to settle; past that, tabd exits as it is (every
// acknowledged command is in the state file already).
DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(4_700)) {
    log.warn("stopping took longer than 5 s: exiting without waiting for the rest")
    _exit(status)
}
await daemon.stop(closeTimeout: .seconds(3))
log.info("stopped")
// A sync that failed while stopping (the last snapshots, the checkpoint) fails the exit too.
exit(daemon.stateFileFailure != nil ? 1 : status)
