import Testing
@testable import TabdServer

/// Which `Host` a tabd without credentials answers (the fence against DNS rebinding), and
/// the refusals' log lines that a flood cannot multiply.
@Suite struct HostPolicyTests {
    let plain = HostPolicy(credentials: false)

    @Test func ipAddressesAndLocalhostAreAlwaysAnswered() {
        for host in ["127.0.0.1", "127.0.0.1:8080", "10.0.0.7:80", "[::1]", "[::1]:8080", "[2001:db8::1]:443",
                     "[::ffff:127.0.0.1]:1", "localhost", "localhost:8080", "LOCALHOST:1", "localhost.", "app.localhost:3000",
                     "a.b.localhost"] {
            #expect(plain.allows(host), "\(host)")
        }
    }

    @Test func anyOtherNameIsRefused() {
        for host in ["evil.example", "evil.example:8080", "localhost.evil.example", "evillocalhost", "127.0.0.1.evil.example",
                     "1.2.3", "[::1", "[nothex]:80", "::1", "evil.example:99999", "ev il.example", "évil.example", "", ":8080",
                     "a..b", "tabd.example@evil.example"] {
            #expect(!plain.allows(host), "\(host)")
        }
        #expect(!plain.allows(nil), "no Host at all (HTTP/1.0)")
    }

    @Test func theNamesItIsToldOfAreAnswered() {
        let p = HostPolicy(credentials: false, listenHost: "box.lan", certificateNames: ["tabd.example.com", "*.apps.example.com"],
                           allowOrigins: ["https://embed.example:8443", "not an origin"], allowHosts: ["Public.Example.", ".corp.example"])
        for host in ["box.lan:8080", "tabd.example.com", "TABD.example.com:443", "x.apps.example.com", "embed.example",
                     "embed.example:9999", "public.example", "public.example.:80", "corp.example", "a.corp.example", "a.b.corp.example"] {
            #expect(p.allows(host), "\(host)")
        }
        // A certificate's wildcard stands for one label; an --allow-host's leading dot for any.
        for host in ["apps.example.com", "a.b.apps.example.com", "example.com", "xcorp.example", "corp.example.evil",
                     "evil.example"] {
            #expect(!p.allows(host), "\(host)")
        }
    }

    @Test func withCredentialsEveryHostIsAnswered() {
        let p = HostPolicy(credentials: true)
        #expect(p.allows("evil.example:8080"))
        #expect(p.allows(nil))
    }

    @Test func anAllowHostValueIsAHostName() {
        for good in ["tabd.example", ".example.com", "Box", "192.168.1.5", "a-b_c.example"] {
            #expect(HostPolicy.problem(allowHost: good) == nil, "\(good)")
        }
        for bad in ["", ".", "tabd.example:8080", "https://tabd.example", "a b", "*.example.com", "a..b", "[::1]"] {
            #expect(HostPolicy.problem(allowHost: bad) != nil, "\(bad)")
        }
    }

    @Test func theOptionIsRepeatableAndReadFromItsVariable() {
        guard case let .run(o) = Options.parse(["--allow-host", "a.example", "--allow-host", ".b.example"]) else {
            Issue.record("refused"); return
        }
        #expect(o.allowHosts == ["a.example", ".b.example"])
        guard case let .run(e) = Options.parse([], environment: ["TABD_ALLOW_HOST": "a.example, c.example"]) else {
            Issue.record("refused"); return
        }
        #expect(e.allowHosts == ["a.example", "c.example"])
        guard case let .exit(message, code) = Options.parse(["--allow-host", "a.example:80"]) else {
            Issue.record("accepted a port"); return
        }
        #expect(code == 2 && message.contains("--allow-host takes a host name without a port"))
        #expect(Options.help.contains("--allow-host NAME"))
    }

    @Test func aFloodOfRefusalsGetsFewLogLines() {
        var lines = RefusalLines()
        #expect(lines.admit("host a", second: 1) == 0)
        // The same host again, any time later: never logged again.
        for s in 1...100 as ClosedRange<UInt64> { #expect(lines.admit("host a", second: s) == nil) }
        // A new host in a second that already had its line waits for the next second.
        #expect(lines.admit("host b", second: 100) == 100)
        #expect(lines.admit("host c", second: 100) == nil)
        #expect(lines.admit("host c", second: 101) == 1)
        // Past 256 remembered keys they are forgotten together (a key is then logged again).
        for i in 0..<300 { _ = lines.admit("host \(i)", second: 1_000 + UInt64(i)) }
        #expect(lines.admit("host a", second: 5_000) != nil)
    }
}
