import ArgumentParsing
import BuildInfo
import FoundationEssentials
import Glibc
import Dispatch
import Portable
import TabdClient

// tabctl: watch and drive a tabd room from the command line (`tabctl --help`).

let environment = ProcessInfo.processInfo.environment
let invocation: Invocation
do {
    invocation = try Invocation.parse(Array(CommandLine.arguments.dropFirst()), environment: environment)
} catch {
    StandardStream.error("tabctl: \(error)\n")
    exit(2)
}
if invocation.version {
    print(BuildInfo.versionLine("tabctl"))
    exit(0)
}
if invocation.help {
    print(invocation.command?.help ?? Invocation.help)
    exit(0)
}
let output = Output(json: invocation.json,
                    colour: !invocation.json && isatty(STDOUT_FILENO) == 1 && environment["NO_COLOR"] == nil && environment["TERM"] != "dumb")
let trust: TLSTrust
do { trust = try invocation.caFile.map { path throws(TLSTrustError) in try TLSTrust(caFile: path) } ?? .system } catch {
    StandardStream.error("tabctl: --ca-file: \(error)\n")
    exit(2)
}
let code = await Run(invocation: invocation, output: output, trust: trust).main()
exit(code)
