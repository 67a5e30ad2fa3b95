import Foundation
import Locking
import Synchronization
import Testing
@testable import WebSockets
@testable import WebSocketsClient
import WebSocketEngine

/// The libuv loop's contexts, made and destroyed while other threads of the process open
/// and use files of their own.
@Suite(.serialized) struct EventLoopTests {
    /// lws 4.1 on libuv closes a context's event pipe a second time after the context is
    /// destroyed; a file another thread opened in between would lose its descriptor. A
    /// thread keeps opening pipes (the lowest free numbers, the very ones lws just freed)
    /// and checks each is still its own (same inode, still readable and writable) while
    /// clients come and go. Without the pipe guard this loses a pipe, or lws or libuv
    /// abort on a socket closed behind their back, in every run.
    @Test func destroyingContextsClosesNoFileOfAnotherThread() async throws {
        let stop = Atomic<Bool>(false)
        let lost = Atomic<Int>(0)
        let checked = Atomic<Int>(0)
        let done = Atomic<Bool>(false)
        let hammer = Thread {
            while !stop.load(ordering: .relaxed) {
                var fds: [Int32] = [-1, -1]
                guard pipe(&fds) == 0 else { continue }
                var before = stat()
                fstat(fds[0], &before)
                var ok = true
                for _ in 0..<20 {
                    var byte: UInt8 = 7
                    var now = stat()
                    if write(fds[1], &byte, 1) != 1 || read(fds[0], &byte, 1) != 1
                        || fstat(fds[0], &now) != 0 || now.st_ino != before.st_ino { ok = false; break }
                }
                if !ok { lost.add(1, ordering: .relaxed) }
                checked.add(1, ordering: .relaxed)
                // Only close what is still ours (a stolen number may be someone else's now).
                if ok { close(fds[0]); close(fds[1]) }
            }
            done.store(true, ordering: .releasing)
        }
        hammer.start()
        defer { stop.store(true, ordering: .relaxed) }
        // Connections still open when a client is destroyed widen the window (lws closes
        // them between its two closes of the pipe).
        let serverHandler = EchoServerHandler()
        let server = try WebSocketServer(configuration: Configuration(port: 0, logLevel: .error), handler: serverHandler)
        serverHandler.server.withLock { $0 = server }
        #expect(server.loop.lws.loop.pipeGuardFound, "the server's pipe guard is armed")
        server.start()
        for round in 0..<100 {
            let handler = RecordingClientHandler()
            let client = try WebSocketClient(configuration: .init(maxConnections: 32, eventLoop: .libuv), handler: handler)
            #expect(client.loop.loop.pipeGuardFound, "round \(round): the client's pipe guard is armed")
            for _ in 0..<16 { _ = client.connect(WebSocketURL(host: "127.0.0.1", port: server.port, path: "/ws")) }
            var opened = 0
            while opened < 16 {
                if case .opened = try await next(handler.events, "round \(round)'s opens", { $0 }) { opened += 1 }
            }
            await client.shutdown()
        }
        await server.shutdown(timeout: .seconds(2))
        stop.store(true, ordering: .relaxed)
        let deadline = ContinuousClock.now + .seconds(10)
        while !done.load(ordering: .acquiring) && ContinuousClock.now < deadline { await Task.yield() }
        #expect(checked.load(ordering: .relaxed) > 0)
        #expect(lost.load(ordering: .relaxed) == 0, "pipes of another thread lost their descriptor")
    }
}
