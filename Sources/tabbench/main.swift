import ArgumentParsing
import Foundation

// tabbench: a load run, a connect storm, an idle-memory or room-memory run, or the in-process
// costs (see --help).

let arguments = Array(CommandLine.arguments.dropFirst())
let status: Int32
do {
    if arguments.first == "inprocess" {
        status = try await InProcessRun.run(Array(arguments.dropFirst()))
    } else {
        let options = try BenchOptions.parse(arguments)
        if options.roomSteps != nil {
            status = try await RoomMemoryRun.run(options)
        } else if options.idleSteps != nil {
            status = try await IdleRun.run(options)
        } else if options.waves != nil {
            status = try await ChurnWavesRun.run(options)
        } else if options.churn != nil {
            status = try await ChurnRun.run(options)
        } else if options.connectOnly {
            status = try await ConnectRun.run(options)
        } else {
            status = try await LoadRun.run(options)
        }
    }
} catch let usage as UsageError {
    if usage.exitCode == 0 {
        print(usage.message)
    } else {
        FileHandle.standardError.write(Data("tabbench: \(usage.message)\nRun 'tabbench --help' for the options.\n".utf8))
    }
    exit(usage.exitCode)
} catch {
    FileHandle.standardError.write(Data("tabbench: \(error)\n".utf8))
    exit(1)
}
exit(status)
