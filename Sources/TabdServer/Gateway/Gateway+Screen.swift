import Dispatch
import Locking
import WebSockets

/// Other web sites fenced out, before anything else a request gets: a `Host` tabd does not
/// know is answered 421 while no credentials are configured (``HostPolicy``; `/healthz`
/// exempt), then a browser's request to the HTTP API or for a WebSocket from an origin other
/// than the page's own or an `--allow-origin` is answered 403. The API's and the upgrade's
/// own checks follow.
final class SiteFence: Sendable {
    private let policy: Locked<HostPolicy>
    private let options: Options
    private let lines = Locked(RefusalLines())

    init(options: Options, credentials: Bool) {
        self.options = options
        policy = Locked(Self.policy(options, credentials: credentials, certificateNames: []))
    }

    static func policy(_ options: Options, credentials: Bool, certificateNames: [String]) -> HostPolicy {
        HostPolicy(credentials: credentials, listenHost: options.host, certificateNames: certificateNames,
                   allowOrigins: options.allowOrigins, allowHosts: options.allowHosts)
    }

    /// The TLS certificate's names (at start, and after `SIGHUP` read it again).
    func certificateNames(_ names: [String]) {
        policy.withLock { p in
            p = Self.policy(options, credentials: !p.enforced, certificateNames: names)
        }
    }

    func allows(host: String?) -> Bool { policy.withLock { $0.allows(host) } }

    /// Whether a refusal of `key` gets a log line now: the first of each key (up to 256
    /// remembered, then forgotten together), at most one line a second; returns how many
    /// refusals went unsaid since the last line.
    func shouldLog(_ key: String) -> Int? {
        let second = DispatchTime.now().uptimeNanoseconds / 1_000_000_000
        return lines.withLock { $0.admit(key, second: second) }
    }
}

/// Which refusals are worth a log line, so that a flood cannot fill the log.
struct RefusalLines: Sendable {
    private var said: Set<String> = []
    private var second: UInt64 = .max
    private var unsaid = 0
    static let remembered = 256

    /// The count of refusals not logged since the last line when `key` is to be logged now;
    /// nil when it is not.
    mutating func admit(_ key: String, second now: UInt64) -> Int? {
        guard !said.contains(key), now != second else {
            unsaid += 1
            return nil
        }
        if said.count >= Self.remembered { said.removeAll() }
        said.insert(key)
        second = now
        defer { unsaid = 0 }
        return unsaid
    }
}

extension Gateway {
    /// The fence's decision on a request (``SiteFence``): nil lets it go on to its own checks.
    func screen(_ request: RequestSummary) -> HTTPResponse? {
        if request.path == "/healthz" || request.path == "/livez" || request.path == "/readyz" { return nil }
        let f = ProxyForwarding.resolve(peer: request.peer, host: request.host, scheme: options.tls == nil ? "http" : "https",
                                   headers: request.forwarding, trusted: options.trustedProxies)
        if !fence.allows(host: f.host) {
            let host = Log.printable(f.host ?? "", limit: 100)
            if let unsaid = fence.shouldLog("host \(host)") {
                let name = f.host.flatMap { ProxyForwarding.Authority(host: $0)?.host } ?? ""
                let hint = HostPolicy.problem(allowHost: name) == nil ? "--allow-host \(Log.printable(name, limit: 100))" : "--allow-host NAME"
                log.warn("refused a request for host '\(host)' from \(f.client) with 421: while no credentials are configured, "
                    + "tabd answers only the hosts it knows (a defence against DNS rebinding); if it is reached by this name, "
                    + "start it with \(hint)\(unsaid > 0 ? " (\(unsaid) more requests refused since the last line)" : "")",
                    LogFields(peer: f.client, code: "421", kind: "fence"))
            }
            return HTTPResponse(status: 421, text: "421 Misdirected Request: tabd does not answer for this host\n")
        }
        guard let origin = request.origin else { return nil }
        let api = request.path.hasPrefix(RoomsAPI.prefix)
        guard api || request.isUpgrade else { return nil }
        if Admission.originAllowed(origin, host: f.host, allowOrigins: options.allowOrigins) { return nil }
        if let unsaid = fence.shouldLog("origin \(origin)") {
            log.warn("refused \(request.isUpgrade ? "upgrade" : "API request") from \(f.client): origin '\(Log.printable(origin, limit: 100))' "
                + "does not match host '\(Log.printable(f.host ?? "", limit: 100))' and is no --allow-origin (403)"
                + (unsaid > 0 ? " (\(unsaid) more requests refused since the last line)" : ""), LogFields(peer: f.client, code: "403", kind: "fence"))
        }
        if request.isUpgrade { return HTTPResponse(status: 403, text: "403 Forbidden: this origin may not connect\n") }
        return APIError(403, "forbidden", "a browser's request from origin '\(origin.prefix(100))' is refused: "
            + "the API answers pages of tabd's own origin only (and of --allow-origin)").response
    }
}
