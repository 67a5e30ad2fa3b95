import Testing
@testable import TabdServer

/// `--allow-origin` takes an origin as browsers send it (``AllowedOrigin``): anything else
/// is a usage error naming the option (or its variable) and the value, never a value kept
/// that would admit every sandboxed page (`null`) or match no browser at all.
@Suite struct AllowedOriginTests {
    @Test(arguments: [
        ("https://app.example", "https://app.example"),
        ("http://localhost:3000", "http://localhost:3000"),
        ("HTTPS://App.Example:8443", "https://app.example:8443"),
        ("https://app.example:443", "https://app.example"),
        ("http://app.example:80", "http://app.example"),
        ("http://app.example:443", "http://app.example:443"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://[::1]:8080", "http://[::1]:8080"),
        ("https://under_score.example", "https://under_score.example"),
    ])
    func anOriginIsKeptAsBrowsersSendIt(_ given: String, _ kept: String) {
        #expect(AllowedOrigin.canonical(given) == .success(kept))
        guard case let .run(o) = Options.parse(["--allow-origin", given]) else { Issue.record("\(given) refused"); return }
        #expect(o.allowOrigins == [kept])
    }

    @Test(arguments: [
        ("null", "'null' is the origin of sandboxed frames"),
        ("NULL", "'null' is the origin of sandboxed frames"),
        ("", "it has no http:// or https://"),
        ("app.example", "it has no http:// or https://"),
        ("*", "it has no http:// or https://"),
        ("file://", "only http and https"),
        ("ws://app.example", "only http and https"),
        ("https://app.example/", "no path, not even a trailing /"),
        ("https://app.example/embed", "no path"),
        ("https://user:secret@app.example", "no user or password"),
        ("https://app.example?x=1", "no query or fragment"),
        ("https://app.example#top", "no query or fragment"),
        ("https://", "'' is not a host name or an IP address"),
        ("https://*.example", "'*.example' is not a host name"),
        ("https://app.example:", "port must be a number from 1 to 65535"),
        ("https://app.example:0", "port must be a number from 1 to 65535"),
        ("https://app.example:65536", "port must be a number from 1 to 65535"),
        ("https://app.example:+80", "port must be a number from 1 to 65535"),
        ("https://app.example:99999999999999999999999", "port must be a number from 1 to 65535"),
        ("https://[::1", "no closing ]"),
        ("https://[zz]:80", "'[zz]' is not an IPv6 address"),
        ("https://[::1]x", "only :PORT may follow the host"),
        ("https://bücher.example", "is not a host name"),
    ])
    func whatIsNotAnOriginIsRefusedNamingTheOptionAndTheValue(_ given: String, _ why: String) {
        guard case let .failure(problem) = AllowedOrigin.canonical(given) else { Issue.record("\(given) taken"); return }
        #expect(problem.description.contains(why), "\(given): \(problem)")
        for (args, environment, name) in [(["--allow-origin", given], [:], "--allow-origin"),
                                          ([], ["TABD_ALLOW_ORIGIN": "https://ok.example, \(given)"], "TABD_ALLOW_ORIGIN")] {
            if name == "TABD_ALLOW_ORIGIN", given.isEmpty { continue } // an empty item of a list is no item
            guard case let .exit(text, code) = Options.parse(args, environment: environment) else {
                Issue.record("\(name) \(given) accepted"); continue
            }
            #expect(code == 2)
            #expect(text.hasPrefix("tabd: \(name) takes an origin, http(s)://HOST[:PORT] as browsers send it"), "\(text)")
            #expect(text.contains("\(problem)"), "\(text)")
        }
    }

    @Test func aRefusalQuotesTheValueWithoutItsPassword() {
        guard case let .exit(text, _) = Options.parse(["--allow-origin", "https://user:hunter2@app.example"]) else {
            Issue.record("accepted"); return
        }
        #expect(text.contains("got 'https://***@app.example'") && !text.contains("hunter2"), "\(text)")
    }
}
