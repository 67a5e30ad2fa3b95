import Coordinator
import Foundation
import TabdClient
import Testing
@testable import TabdServer

/// A daemon serving HTTPS and WSS in-process, reached by `TabdClient` and `TabdAPI` over
/// TLS: verified against a private CA (given as a file or as PEM), refused without it or
/// for another host name, with the reason in the error; and the pair rotated by `reload()`.
@Suite(.serialized) struct TLSTests {
    /// A private CA and two server certificates for localhost and 127.0.0.1, made with the
    /// `openssl` command in a fresh directory.
    struct Certificates {
        let directory: String
        var ca: String { directory + "/ca.pem" }
        func cert(_ name: String) -> String { directory + "/\(name).pem" }
        func key(_ name: String) -> String { directory + "/\(name).key" }

        init() throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("tabd-tls-\(UUID().uuidString)").path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            try openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
                        "-subj", "/CN=tabd test CA", "-addext", "basicConstraints=critical,CA:TRUE",
                        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
            for name in ["a", "b"] {
                try openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "\(name).key", "-out", "\(name).csr", "-subj", "/CN=localhost")
                try "subjectAltName=DNS:localhost,IP:127.0.0.1\n".write(toFile: directory + "/ext", atomically: true, encoding: .utf8)
                try openssl("x509", "-req", "-in", "\(name).csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                            "-out", "\(name).pem", "-days", "2", "-extfile", "ext")
            }
        }

        private func openssl(_ arguments: String...) throws {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
            process.arguments = arguments
            process.currentDirectoryURL = URL(fileURLWithPath: directory)
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            process.waitUntilExit()
            guard process.terminationStatus == 0 else { throw CocoaError(.fileWriteUnknown) }
        }

        func remove() { try? FileManager.default.removeItem(atPath: directory) }
    }

    static func start(_ certs: Certificates, cert: String = "a") async throws -> Daemon {
        try await DaemonTests.start {
            $0.tlsCertificate = certs.cert(cert)
            $0.tlsKey = certs.key(cert)
        }
    }

    @Test func clientAndAPIReachATLSDaemonVerifiedByAPrivateCA() async throws {
        let certs = try Certificates()
        defer { certs.remove() }
        let daemon = try await Self.start(certs)
        #expect(daemon.url == "https://127.0.0.1:\(daemon.port)/")
        let trust = try TLSTrust(caFile: certs.ca)
        let client = try await TabdClient.connect(url: daemon.url, room: "secure", options: .init(tls: trust))
        let seq = try await client.tap("profile")
        let state = await client.state
        #expect(state.seq == seq && state.selected == "profile")

        // The CA as PEM bytes, and the wss:// form of the URL with a host name.
        let pem = try TLSTrust(extraCertificates: Array(try Data(contentsOf: URL(fileURLWithPath: certs.ca))))
        let other = try await TabdClient.connect(url: "wss://localhost:\(daemon.port)/ws", room: "secure", options: .init(tls: pem))
        // The first client hears of the second one's join (in the second one's welcome)
        // by the time its `sync` is answered.
        _ = try await client.sync()
        let seen = await other.state, theirs = await client.state
        #expect(seen == theirs)

        let api = try TabdAPI(url: daemon.url, tls: trust)
        #expect(try await api.allRooms().map(\.id) == ["secure"])
        let tapped = try await api.perform(.tap(tab: "home"), in: "secure")
        #expect(try await client.sync().seq == tapped)

        await other.close()
        await client.close()
        await daemon.stop(closeTimeout: .seconds(1))
    }

    @Test func withoutTheCAOrOverPlainTextTheClientsSayWhy() async throws {
        let certs = try Certificates()
        defer { certs.remove() }
        let daemon = try await Self.start(certs)
        // The system's store does not hold the test CA: refused, with OpenSSL's reason.
        let refused = await TabdClient.outcomeOfConnect(url: daemon.url, room: "r")
        #expect(refused?.contains("certificate") == true && refused?.contains("unable to get local issuer") == true, "\(refused ?? "connected")")
        await #expect { _ = try await TabdAPI(url: daemon.url).allRooms() } throws: { error in
            "\(error)".contains("certificate verify failed")
        }
        // http:// to the TLS port: the redirect to https is reported, not followed.
        let plain = await TabdClient.outcomeOfConnect(url: "http://127.0.0.1:\(daemon.port)/", room: "r")
        #expect(plain?.contains("https") == true && plain?.contains("301") == true, "\(plain ?? "connected")")
        #expect(throws: TLSTrustError.self) { try TLSTrust(caFile: certs.directory + "/nowhere.pem") }
        #expect(throws: TLSTrustError.self) { try TLSTrust(extraCertificates: Array("not a certificate".utf8)) }
        await daemon.stop(closeTimeout: .seconds(1))
    }

    /// Every client has a libwebsockets context of its own, and creating one renews a
    /// process-wide index libwebsockets' own certificate check depends on: clients that
    /// connect at the same moment (each creating its context while another one's handshake
    /// is under way) must all verify the server and connect.
    @Test func clientsConnectingAtOnceAllVerifyTheServer() async throws {
        let certs = try Certificates()
        defer { certs.remove() }
        let daemon = try await Self.start(certs)
        let trust = try TLSTrust(caFile: certs.ca)
        for round in 0..<12 {
            let failures = await withTaskGroup(of: String?.self) { group in
                for _ in 0..<6 {
                    group.addTask {
                        await TabdClient.outcomeOfConnect(url: daemon.url, room: "r", options: .init(reconnects: false, tls: trust))
                    }
                }
                var failures: [String] = []
                for await failure in group { if let failure { failures.append(failure) } }
                return failures
            }
            #expect(failures.isEmpty, "round \(round): \(failures)")
        }
        await daemon.stop(closeTimeout: .seconds(1))
    }

    @Test func reloadSwapsThePairAndABadPairChangesNothing() async throws {
        let certs = try Certificates()
        defer { certs.remove() }
        let cert = certs.directory + "/live.pem", key = certs.directory + "/live.key"
        try FileManager.default.copyItem(atPath: certs.cert("a"), toPath: cert)
        try FileManager.default.copyItem(atPath: certs.key("a"), toPath: key)
        let daemon = try await DaemonTests.start {
            $0.tlsCertificate = cert
            $0.tlsKey = key
        }
        let trust = try TLSTrust(caFile: certs.ca)
        let kept = try await TabdClient.connect(url: daemon.url, room: "r", options: .init(reconnects: false, tls: trust))
        // A mismatched pair (b's certificate, a's key): refused, the old pair serves on.
        try FileManager.default.removeItem(atPath: cert)
        try FileManager.default.copyItem(atPath: certs.cert("b"), toPath: cert)
        #expect(daemon.reload() == false)
        #expect(daemon.server.certificate?.summary.contains("CN=localhost") == true)
        #expect((daemon.server.certificate?.secondsLeft ?? 0) > 86_400, "the test certificates are valid for two days")
        try FileManager.default.removeItem(atPath: key)
        try FileManager.default.copyItem(atPath: certs.key("b"), toPath: key)
        #expect(daemon.reload() == true)
        let fresh = try await TabdClient.connect(url: daemon.url, room: "r", options: .init(tls: trust))
        _ = try await kept.tap("favorites")
        #expect(try await fresh.sync().selected == "favorites", "the connection opened before the reload still works")
        await fresh.close()
        await kept.close()
        await daemon.stop(closeTimeout: .seconds(1))
    }
}
