import Auth
import Foundation
import Locking
import TabdClient
import TabdLoad
import Testing

/// A transport over the real one whose current connection the test can cut, as a network
/// would (the client sees it close and reconnects).
final class CuttableTransport: TabdTransport {
    let inner: WebSocketTransport
    private let current = Locked<(any TabdConnection)?>(nil)
    private let refreshes = Locked(0)

    init() throws { inner = try WebSocketTransport() }

    func open(_ url: String) -> any TabdConnection { open(url, authorization: nil) }

    func open(_ url: String, authorization: String?) -> any TabdConnection {
        let c = Counting(inner.open(url, authorization: authorization), refreshes: refreshes)
        current.withLock { $0 = c }
        return c
    }

    func shutdown() async { await inner.shutdown() }

    /// Cuts the connection open now.
    func cut() { current.withLock { $0 }?.close(code: 4000, reason: "cut by the test") }

    /// `refresh` frames sent, on every connection.
    var refreshesSent: Int { refreshes.withLock { $0 } }

    private final class Counting: TabdConnection {
        let wrapped: any TabdConnection
        let refreshes: Locked<Int>
        init(_ wrapped: any TabdConnection, refreshes: Locked<Int>) { self.wrapped = wrapped; self.refreshes = refreshes }
        var events: AsyncStream<TransportEvent> { wrapped.events }
        func send(_ text: [UInt8]) {
            if text.starts(with: Array(#"{"type":"refresh""#.utf8)) { refreshes.withLock { $0 += 1 } }
            wrapped.send(text)
        }
        func close(code: UInt16, reason: String) { wrapped.close(code: code, reason: reason) }
    }
}

/// A client on 3-second tokens from its provider (`TABD_TOKEN_LIFETIME`), under a steady
/// command load for a minute (`TABD_TOKEN_RUN_SECONDS`; at least 15 token lifetimes): every planned refresh goes on the
/// open connection (no reconnect), no command fails for want of a token, and the room's
/// stream has no gap and no duplicate; then, with the connection cut now and then, every
/// reconnect (on a fresh token) resumes, never a fresh snapshot.
@Suite struct FreshTokensRunTests {
    @Test func aClientOnThreeSecondTokensRunsUnderLoadWithoutAReconnectForARefresh() async throws {
        let seconds = Double(ProcessInfo.processInfo.environment["TABD_TOKEN_RUN_SECONDS"] ?? "") ?? 60
        // Under ThreadSanitizer (make test-tsan) everything runs many times slower: there the
        // run looks for races with 10-second tokens, not for the timing of 3-second ones.
        let lifetime = Double(ProcessInfo.processInfo.environment["TABD_TOKEN_LIFETIME"] ?? "") ?? 3
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("tabd-tokens-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let keyFile = folder.appendingPathComponent("auth.key")
        let secret = Array((0..<48).map { _ in UInt8.random(in: 0x61...0x7A) })
        #expect(FileManager.default.createFile(atPath: keyFile.path, contents: Data(secret), attributes: [.posixPermissions: 0o600]))
        let tabd = try TabdProcess(["--auth-secret-file", keyFile.path])
        defer { tabd.stop() }
        let key = try SigningKey(bytes: secret, source: "the test's key")
        let issued = Locked<[TabdClient.TokenRequest.Reason]>([])
        let provider: TabdClient.TokenProvider = { request in
            issued.withLock { $0.append(request.reason) }
            let now = Date().timeIntervalSince1970
            return Token(key: key).sign(Grant(role: .control, scope: .room("run"), expires: now + lifetime), issuedAt: Int(now))
        }
        let transport = try CuttableTransport()
        let client = try await TabdClient.connect(url: tabd.url, room: "run", name: "kiosk",
                                                  options: .init(initialBackoff: .milliseconds(20), maxBackoff: .milliseconds(200),
                                                                 transport: transport, tokenProvider: provider))
        let updates = await client.updates()
        let watcher = Task { () -> [TabdClient.Update] in
            var seen: [TabdClient.Update] = []
            for await u in updates { seen.append(u) }
            return seen
        }
        let clock = ContinuousClock()
        let cutsFrom = clock.now + .seconds(seconds * 0.75)
        let end = clock.now + .seconds(seconds)
        var acked = 0, refused = 0, lostBeforeCuts = 0, lostDuringCuts = 0, cuts = 0
        var nextCut = cutsFrom
        while clock.now < end {
            let cutting = clock.now >= cutsFrom
            if cutting, clock.now >= nextCut {
                transport.cut()
                cuts += 1
                nextCut = clock.now + .milliseconds(2_500)
            }
            do {
                try await client.scroll(to: Double(acked % 500), on: "home")
                acked += 1
            } catch TabdClientError.connectionLost {
                if cutting { lostDuringCuts += 1 } else { lostBeforeCuts += 1 }
            } catch let error as TabdClientError {
                guard case .refused = error else { throw error }
                refused += 1
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        let refreshes = transport.refreshesSent
        await client.close()
        let seen = await watcher.value

        let expiries = Int(seconds * 0.75 / lifetime)
        print("fresh tokens run: \(seconds) s, \(acked) acked, \(refused) refused, \(lostBeforeCuts) lost before the cuts, "
              + "\(lostDuringCuts) lost at \(cuts) cuts, \(refreshes) refreshes, tokens asked: "
              + "\(issued.withLock { $0.filter { $0 == .connect }.count }) to connect, \(issued.withLock { $0.filter { $0 == .refresh }.count }) to refresh")
        #expect(expiries >= 15 || seconds < 60, "the run spans \(expiries) token lifetimes before the cuts")
        #expect(acked > 0 && refused == 0)
        // What closed a connection, and when (seconds into the run), for the messages below.
        let drops = seen.compactMap { u -> String? in
            guard case let .disconnected(close) = u else { return nil }
            return "\(close.code.map(String.init) ?? "no code") \(close.reason)"
        }
        #expect(lostBeforeCuts == 0, "no command failed while tokens were refreshed on the open connection; drops: \(drops)")
        #expect(refreshes >= expiries, "each token was refreshed before it ran out: \(refreshes) refreshes for \(expiries) lifetimes")
        // Welcomes after the first (which came before the subscription): one per cut, each
        // a resume.
        let welcomes = seen.compactMap { if case let .connected(_, resumed) = $0 { resumed } else { nil } }
        #expect(welcomes.count == cuts, "\(welcomes.count) welcomes for \(cuts) cuts: a refresh never reconnects; drops: \(drops)")
        #expect(welcomes.allSatisfy { $0 }, "every reconnect resumed")
        let snapshots = seen.filter { if case .snapshot = $0 { true } else { false } }.count
        #expect(snapshots == 1, "only the subscription's first snapshot: no reconnect started over")
        // The stream: consecutive seqs, none twice.
        var last: Int?
        var gaps = 0, duplicates = 0
        for case let .events(batch) in seen {
            for e in batch.events {
                if let last, e.seq != last + 1 { if e.seq <= last { duplicates += 1 } else { gaps += 1 } }
                last = e.seq
            }
        }
        #expect(gaps == 0 && duplicates == 0, "\(gaps) gaps, \(duplicates) duplicates")
        #expect(!seen.contains { if case .closed(let e) = $0 { e != .closed(code: 1000, reason: "closed by this client") } else { false } })
    }
}
