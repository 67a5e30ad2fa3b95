// The fuzz binary of scripts/fuzz (`make fuzz`): one libFuzzer executable whose target is
// chosen by TABD_FUZZ_TARGET. Built only with TABD_FUZZ=1 and -sanitize=fuzzer,address
// (see Package.swift); never part of an ordinary build.
#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// The targets, by the name TABD_FUZZ_TARGET gives.
let targets: [String: @Sendable ([UInt8]) -> Void] = [
    "json": JSONTarget.run,
    "command": CommandTarget.run,
    "tabs": TabsTarget.run,
    "snapshot": SnapshotTarget.run,
    "query": QueryTarget.run,
    "roomid": RoomIDTarget.run,
    "jwt": JWTTarget.run,
    "statefile": StateFileTarget.run,
    "http": HTTPTarget.run,
    "frames": FramesTarget.run,
    "api": APITarget.run,
    "forwarded": ForwardedTarget.run,
    "engine": EngineTarget.run,
    "seal": SealTarget.run,
    "envelope": EnvelopeTarget.run,
]

nonisolated(unsafe) var selected: (@Sendable ([UInt8]) -> Void)?

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = size == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: size))
    selected!(bytes)
    return 0
}

/// libFuzzer's own driver (linked in by -sanitize=fuzzer; `int LLVMFuzzerRunDriver(int *argc,
/// char ***argv, int (*cb)(const uint8_t *, size_t))`). Called by name so the linker keeps
/// it: this executable has its own `main`, which SwiftPM requires of an executable target.
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<CInt>,
                         _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                         _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt) -> CInt

@main
enum Entry {
    static func main() {
        let env = ProcessInfo.processInfo.environment
        if let dir = env["TABD_FUZZ_MAKE_SEEDS"] {
            Seeds.make(into: dir)
            exit(0)
        }
        guard let name = env["TABD_FUZZ_TARGET"], let run = targets[name] else {
            FileHandle.standardError.write(Data("tabdfuzz: set TABD_FUZZ_TARGET to one of \(targets.keys.sorted().joined(separator: ", "))\n".utf8))
            exit(2)
        }
        selected = run
        var argc = CommandLine.argc
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
        exit(LLVMFuzzerRunDriver(&argc, &argv, fuzzOne))
    }
}
