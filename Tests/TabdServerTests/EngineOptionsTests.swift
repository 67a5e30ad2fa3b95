import ArgumentParsing
import Foundation
import Testing
@testable import JetStream
@testable import TabdServer

/// The engine's TLS and credentials options: how they are parsed (command line and TABD_
/// variables, what excludes what), and what ``Options/engineSecurity(warn:)`` reads.
@Suite struct EngineOptionsTests {
    static let cluster = ["--cluster", "nats://127.0.0.1:4222"]

    func parsed(_ args: [String], _ environment: [String: String] = [:]) -> Options? {
        if case let .run(o) = Options.parse(args, environment: environment) { return o }
        return nil
    }

    /// The usage error's first line and its exit status, or nil when the options parse.
    func refused(_ args: [String], _ environment: [String: String] = [:]) -> (String, Int32)? {
        if case let .exit(text, code) = Options.parse(args, environment: environment) {
            return (String(text.split(separator: "\n").first ?? ""), code)
        }
        return nil
    }

    /// A file in a fresh temporary directory holding `text`, with `mode`.
    func file(_ text: String, mode: Int = 0o600) throws -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tabd-engine-options-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let path = dir.appendingPathComponent("file").path
        #expect(FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: mode]))
        return path
    }

    @Test func everyOptionOnTheCommandLine() throws {
        let o = try #require(parsed(Self.cluster + ["--cluster-tls-ca", "ca.pem", "--cluster-tls-cert", "node.pem",
                                                    "--cluster-tls-key", "node-key.pem", "--cluster-user", "tabd",
                                                    "--cluster-password-file", "pw"]))
        #expect(o.clusterTLSCA == "ca.pem" && o.clusterTLSCert == "node.pem" && o.clusterTLSKey == "node-key.pem")
        #expect(o.clusterUser == "tabd" && o.clusterPasswordFile == "pw" && o.clusterCreds == nil)
        let c = try #require(parsed(Self.cluster + ["--cluster-creds", "tabd.creds"]))
        #expect(c.clusterCreds == "tabd.creds" && c.clusterUser == nil)
        let plain = try #require(parsed(Self.cluster))
        #expect(plain.clusterTLSCA == nil && plain.clusterCreds == nil && plain.clusterUser == nil && plain.clusterPasswordFile == nil)
    }

    @Test func everyOptionFromItsVariable() throws {
        let o = try #require(parsed([], ["TABD_CLUSTER": "tls://127.0.0.1:4222", "TABD_CLUSTER_TLS_CA": "ca.pem",
                                         "TABD_CLUSTER_TLS_CERT": "node.pem", "TABD_CLUSTER_TLS_KEY": "node-key.pem",
                                         "TABD_CLUSTER_USER": "tabd", "TABD_CLUSTER_PASSWORD_FILE": "pw"]))
        #expect(o.cluster == ["tls://127.0.0.1:4222"] && o.clusterTLSCA == "ca.pem" && o.clusterTLSCert == "node.pem")
        #expect(o.clusterTLSKey == "node-key.pem" && o.clusterUser == "tabd" && o.clusterPasswordFile == "pw")
        let c = try #require(parsed(Self.cluster, ["TABD_CLUSTER_CREDS": "tabd.creds"]))
        #expect(c.clusterCreds == "tabd.creds")
    }

    @Test func theCommandLineWins() throws {
        // An option beats its variable; credentials given one way set the other way's variables aside.
        let o = try #require(parsed(Self.cluster + ["--cluster-tls-ca", "mine.pem", "--cluster-creds", "tabd.creds"],
                                    ["TABD_CLUSTER_TLS_CA": "theirs.pem", "TABD_CLUSTER_USER": "u", "TABD_CLUSTER_PASSWORD_FILE": "pw"]))
        #expect(o.clusterTLSCA == "mine.pem" && o.clusterCreds == "tabd.creds" && o.clusterUser == nil && o.clusterPasswordFile == nil)
        let u = try #require(parsed(Self.cluster + ["--cluster-user", "u", "--cluster-password-file", "pw"], ["TABD_CLUSTER_CREDS": "x.creds"]))
        #expect(u.clusterCreds == nil && u.clusterUser == "u")
        // The user on the command line, its password file from the environment.
        let mixed = try #require(parsed(Self.cluster + ["--cluster-user", "u"], ["TABD_CLUSTER_PASSWORD_FILE": "pw"]))
        #expect(mixed.clusterUser == "u" && mixed.clusterPasswordFile == "pw")
        // --state chose a node of its own: the cluster's variables are set aside with TABD_CLUSTER.
        let single = try #require(parsed(["--state", ":memory:"], ["TABD_CLUSTER": "nats://x:1", "TABD_CLUSTER_CREDS": "x.creds",
                                                                   "TABD_CLUSTER_TLS_CA": "ca.pem"]))
        #expect(single.cluster.isEmpty && single.clusterCreds == nil && single.clusterTLSCA == nil)
    }

    @Test func usageErrors() {
        let cases: [([String], [String: String], String)] = [
            (["--cluster-creds", "c", "--cluster-user", "u", "--cluster-password-file", "p"], [:],
             "tabd: --cluster-creds and --cluster-user exclude each other: give a credentials file, or a user and a password file"),
            ([], ["TABD_CLUSTER_CREDS": "c", "TABD_CLUSTER_USER": "u", "TABD_CLUSTER_PASSWORD_FILE": "p"],
             "tabd: TABD_CLUSTER_CREDS and TABD_CLUSTER_USER exclude each other: give a credentials file, or a user and a password file"),
            (["--cluster-creds", "c", "--cluster-password-file", "p"], [:],
             "tabd: --cluster-creds and --cluster-password-file exclude each other: give a credentials file, or a user and a password file"),
            (["--cluster-user", "u"], [:], "tabd: --cluster-user needs --cluster-password-file too"),
            (["--cluster-password-file", "p"], [:], "tabd: --cluster-password-file needs --cluster-user too"),
            (["--cluster-tls-cert", "c.pem"], [:], "tabd: --cluster-tls-cert needs --cluster-tls-key too"),
            ([], ["TABD_CLUSTER_TLS_KEY": "k.pem"], "tabd: TABD_CLUSTER_TLS_KEY needs --cluster-tls-cert too"),
            (["--cluster-tls-ca", ""], [:], "tabd: --cluster-tls-ca must not be empty"),
            (["--cluster-user", ""], [:], "tabd: --cluster-user must not be empty"),
            (["--cluster-password", "secret"], [:],
             "tabd: --cluster-password is not taken: the engine's password is read from a file (--cluster-password-file)"),
            ([], ["TABD_CLUSTER_PASSWORD": "secret"],
             "tabd: TABD_CLUSTER_PASSWORD is not taken: the engine's password is read from a file (--cluster-password-file)"),
            (["--cluster-tls-ca"], [:], "tabd: --cluster-tls-ca needs a value"),
        ]
        for (args, environment, message) in cases {
            let answer = refused(Self.cluster + args, environment)
            #expect(answer?.0 == message, "\(args) \(environment)")
            #expect(answer?.1 == 2)
        }
    }

    /// A URL's user, password or token (`nats://user:pass@host`, `nats://token@host`) is
    /// refused like `--cluster-password`, saying how credentials are given, and the refusal
    /// never repeats them.
    @Test func credentialsInAClusterURLAreRefusedSayingHowToGiveThem() {
        let how = ": give the engine's user with --cluster-user NAME and its password in a file with --cluster-password-file FILE, "
            + "or a NATS credentials file with --cluster-creds FILE (TABD_CLUSTER_USER, TABD_CLUSTER_PASSWORD_FILE, TABD_CLUSTER_CREDS)"
        let cases: [([String], [String: String], String)] = [
            (["--cluster", "nats://tabd:hunter2@n1:4222"], [:], "tabd: --cluster takes URLs without credentials, got 'nats://***@n1:4222'"),
            (["--cluster", "nats://n1:4222, tls://hunter2@n2:4222"], [:], "tabd: --cluster takes URLs without credentials, got 'tls://***@n2:4222'"),
            (["--cluster", "nats://tabd:p@ss:hunter2@n1"], [:], "tabd: --cluster takes URLs without credentials, got 'nats://***@n1'"),
            (["--cluster", "tabd:hunter2@n1:4222"], [:], "tabd: --cluster takes URLs without credentials, got '***@n1:4222'"),
            ([], ["TABD_CLUSTER": "nats://tabd:hunter2@n1:4222,nats://n2:4222"],
             "tabd: TABD_CLUSTER takes URLs without credentials, got 'nats://***@n1:4222'"),
        ]
        for (args, environment, message) in cases {
            guard case let .exit(text, code) = Options.parse(args, environment: environment) else {
                Issue.record("\(args) \(environment) accepted"); continue
            }
            #expect(code == 2)
            #expect(text.split(separator: "\n").first.map(String.init) == message + how, "\(text)")
            #expect(!text.contains("hunter2"))
        }
    }

    @Test func aURLsCredentialsNeverReachALogLine() {
        #expect(EngineURL.redacted("nats://tabd:hunter2@n1:4222") == "nats://***@n1:4222")
        #expect(EngineURL.redacted("tls://token@[::1]:4222") == "tls://***@[::1]:4222")
        #expect(EngineURL.redacted("nats://a@b@n1") == "nats://***@n1")
        #expect(EngineURL.redacted("u:p@n1:4222") == "***@n1:4222")
        #expect(EngineURL.redacted("x:y@z://n1@n2") == "***@n2", "a scheme is only letters")
        #expect(EngineURL.redacted("nats://n1:4222") == "nats://n1:4222")
        #expect(EngineURL.redacted(["nats://n1:4222", "nats://u:hunter2@n2:4222"]) == "nats://n1:4222,nats://***@n2:4222")
        // What libnats refuses to connect to is said without the password.
        do {
            _ = try EngineClient(urls: ["nats://tabd:hunter2@127.0.0.1:1"], name: "redaction test")
            Issue.record("connected to port 1")
        } catch {
            #expect("\(error)".contains("nats://***@127.0.0.1:1") && !"\(error)".contains("hunter2"), "\(error)")
        }
    }

    /// A daemon given such a URL anyway (in process, past the parser) says why it cannot
    /// start without the password: the engine's refusal names the redacted URL.
    @Test func aNodeThatCannotReachTheEngineNamesTheURLWithoutItsPassword() async throws {
        var o = DaemonTests.options()
        o.state = nil
        o.cluster = ["nats://tabd:hunter2@127.0.0.1:1"]
        o.clusterSecretFile = try file(String(repeating: "k", count: 40) + "\n")
        do {
            let daemon = try await Daemon.start(o, log: Log(level: .error))
            await daemon.stop(closeTimeout: .seconds(1))
            Issue.record("started without an engine")
        } catch {
            #expect(error.description.contains("nats://***@127.0.0.1:1") && !error.description.contains("hunter2"), "\(error)")
        }
    }

    @Test func forwardingIsOnUnlessTurnedOff() throws {
        #expect(try #require(parsed(Self.cluster)).clusterForwarding == true)
        #expect(try #require(parsed(Self.cluster + ["--cluster-forwarding", "off"])).clusterForwarding == false)
        #expect(try #require(parsed(Self.cluster, ["TABD_CLUSTER_FORWARDING": "off"])).clusterForwarding == false)
        #expect(try #require(parsed(Self.cluster + ["--cluster-forwarding", "on"], ["TABD_CLUSTER_FORWARDING": "off"])).clusterForwarding)
        #expect(refused(Self.cluster + ["--cluster-forwarding", "maybe"])?.0 == "tabd: --cluster-forwarding takes on or off, got 'maybe'")
        #expect(refused(["--cluster-forwarding", "off"])?.0 == "tabd: --cluster-forwarding is for a node of a cluster: it needs --cluster")
    }

    @Test func theEnginesOptionsNeedCluster() {
        let cases: [([String], [String: String], String)] = [
            (["--cluster-tls-ca", "ca.pem"], [:], "--cluster-tls-ca"),
            (["--state", ":memory:", "--cluster-creds", "c"], [:], "--cluster-creds"),
            ([], ["TABD_CLUSTER_USER": "u", "TABD_CLUSTER_PASSWORD_FILE": "p"], "TABD_CLUSTER_USER"),
        ]
        for (args, environment, name) in cases {
            let answer = refused(args, environment)
            #expect(answer?.0 == "tabd: \(name) is for a node of a cluster: it needs --cluster")
            #expect(answer?.1 == 2)
        }
    }

    @Test func thePasswordIsReadOnceWithoutItsTrailingNewline() throws {
        for (text, password) in [("s3cret\n", "s3cret"), ("s3cret\r\n", "s3cret"), ("s3cret", "s3cret"), ("a b \"\\\n\n", "a b \"\\\n")] {
            let pw = try file(text)
            let o = try #require(parsed(Self.cluster + ["--cluster-user", "tabd", "--cluster-password-file", pw]))
            var warnings: [String] = []
            let security = try o.engineSecurity(warn: { warnings.append($0) })
            #expect(security.credentials == .user("tabd", password: password))
            #expect(warnings.isEmpty)
            // Read at start: the file may go afterwards.
            try FileManager.default.removeItem(atPath: pw)
            #expect(security.credentials == .user("tabd", password: password))
            #expect(!security.description.contains(password) && !security.summary(urls: o.cluster).contains(password))
        }
    }

    @Test func anEmptyOrMissingFileIsAnErrorNamingIt() throws {
        let empty = try file("\n")
        let o = try #require(parsed(Self.cluster + ["--cluster-user", "tabd", "--cluster-password-file", empty]))
        do {
            _ = try o.engineSecurity(warn: { _ in })
            Issue.record("an empty password file was accepted")
        } catch {
            #expect(error.message == "the engine's password file '\(empty)' (--cluster-password-file) is empty")
        }
        let missing = "/nonexistent/tabd-\(UUID().uuidString)"
        for option in ["--cluster-tls-ca", "--cluster-creds", "--cluster-password-file"] {
            var args = Self.cluster + [option, missing]
            if option == "--cluster-password-file" { args += ["--cluster-user", "tabd"] }
            let m = try #require(parsed(args))
            do {
                _ = try m.engineSecurity(warn: { _ in })
                Issue.record("\(option): a missing file was accepted")
            } catch {
                #expect(error.message.hasPrefix("cannot read the engine's ") && error.message.hasSuffix("'\(missing)' (\(option)): No such file or directory"),
                        "\(error.message)")
            }
        }
        let directory = FileManager.default.temporaryDirectory.path
        let d = try #require(parsed(Self.cluster + ["--cluster-creds", directory]))
        do {
            _ = try d.engineSecurity(warn: { _ in })
            Issue.record("a directory was taken for a credentials file")
        } catch {
            #expect(error.message == "cannot read the engine's credentials file '\(directory)' (--cluster-creds): it is a directory")
        }
    }

    @Test func tlsAndCredentialsFilesBecomeTheEnginesSecurity() throws {
        let ca = try file("ca"), cert = try file("cert"), key = try file("key", mode: 0o644), creds = try file("creds", mode: 0o640)
        let o = try #require(parsed(Self.cluster + ["--cluster-tls-ca", ca, "--cluster-tls-cert", cert, "--cluster-tls-key", key,
                                                    "--cluster-creds", creds]))
        var warnings: [String] = []
        let security = try o.engineSecurity(warn: { warnings.append($0) })
        #expect(security == EngineSecurity(caFile: ca, certificateFile: cert, keyFile: key, credentials: .file(creds)))
        #expect(security.usesTLS(urls: o.cluster))
        #expect(security.summary(urls: o.cluster) == "over TLS (CA '\(ca)', client certificate '\(cert)') with the credentials file '\(creds)'")
        // Secrets other users can read are warned about; certificates are public.
        #expect(warnings == ["the engine's TLS key file '\(key)' can be read by other users (mode 644); chmod 600 it",
                             "the engine's credentials file '\(creds)' can be read by other users (mode 640); chmod 600 it"])
        let plain = try #require(parsed(Self.cluster)).engineSecurity(warn: { _ in })
        #expect(plain == EngineSecurity() && !plain.usesTLS(urls: ["nats://a:1"]) && plain.summary(urls: ["nats://a:1"]).isEmpty)
    }

    @Test func tlsURLsAskForTLS() {
        let none = EngineSecurity()
        #expect(none.usesTLS(urls: ["nats://a:1", "TLS://b:2"]))
        #expect(!none.usesTLS(urls: ["nats://a:1"]))
        #expect(EngineSecurity(tls: true).usesTLS(urls: ["nats://a:1"]))
        #expect(EngineSecurity(caFile: "ca.pem").usesTLS(urls: ["nats://a:1"]))
        #expect(none.summary(urls: ["tls://a:1"]) == "over TLS")
        #expect(EngineSecurity(credentials: .user("tabd", password: "pw")).summary(urls: ["nats://a:1"]) == "as user 'tabd'")
    }

    @Test func userAndPasswordAreEscapedForLibnatsJSON() {
        #expect(EngineSecurity.jsonEscaped("plain-Pässwort") == "plain-Pässwort")
        #expect(EngineSecurity.jsonEscaped(#"a"b\c"#) == #"a\"b\\c"#)
        #expect(EngineSecurity.jsonEscaped("tab\tline\nnul\u{0}del\u{7F}") == #"tab\tline\nnul\u0000del\u007f"#)
    }

    // MARK: The cluster secret

    @Test func aNodeNeedsAClusterSecretOfItsOwnAndSaysHowToMakeOne() throws {
        let o = try #require(parsed(Self.cluster))
        #expect(throws: UsageError.self) { try o.engineTrust(warn: { _ in }) }
        do { _ = try o.engineTrust(warn: { _ in }) } catch {
            #expect(error.message.contains("needs --cluster-secret-file") && error.message.contains("openssl rand -hex 32"))
        }
        let key = String(repeating: "k", count: 40)
        let secret = try file("# the cluster's keys\n\(key)\n")
        let fromVariable = try #require(parsed(Self.cluster, ["TABD_CLUSTER_SECRET_FILE": secret]))
        let trust = try fromVariable.engineTrust(warn: { _ in })
        #expect(!trust.acceptUnsigned && trust.secret.contains(key: Array(key.utf8)))
        // The tokens' signing key is never a cluster key.
        let shared = try #require(parsed(Self.cluster + ["--cluster-secret-file", secret, "--auth-secret-file", try file(key + "\n")]))
        do { _ = try shared.engineTrust(warn: { _ in }); Issue.record("a cluster secret holding the tokens' key was taken") } catch {
            #expect(error.message.contains("holds the key that signs tokens"))
        }
        let short = try #require(parsed(Self.cluster + ["--cluster-secret-file", try file("short\n")]))
        do { _ = try short.engineTrust(warn: { _ in }); Issue.record("a short key was taken") } catch {
            #expect(error.message.contains("a key needs at least 32"))
        }
    }

    @Test func phaseOneOfTheMoveToSealsIsAskedForAndWarnedOf() throws {
        let secret = try file(String(repeating: "k", count: 40) + "\n")
        let o = try #require(parsed(Self.cluster + ["--cluster-secret-file", secret, "--cluster-unsigned", "accept"]))
        var warnings: [String] = []
        #expect(try o.engineTrust(warn: { warnings.append($0) }).acceptUnsigned)
        #expect(warnings.contains { $0.contains("--cluster-unsigned accept") })
        #expect(try #require(parsed(Self.cluster + ["--cluster-unsigned", "refuse"])).clusterAcceptUnsigned == false)
        #expect(refused(Self.cluster + ["--cluster-unsigned", "maybe"])?.0 == "tabd: --cluster-unsigned takes accept or refuse, got 'maybe'")
    }
}
