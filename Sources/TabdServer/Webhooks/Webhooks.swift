import Auth
import Cluster
import Outbox
import StateStore
import WebSocketsClient

/// The outbox and the webhooks that deliver it (`--webhook`): made once the state is open,
/// started once tabd listens, stopped after the rooms. On a node of a cluster the engine's
/// history is the outbox, and each webhook's ``ClusterFeed`` reads this node's share of it.
final class Webhooks: Sendable {
    /// A single tabd's outbox (nil on a node of a cluster).
    let outbox: Outbox?
    let deliveries: [WebhookDelivery]
    let feeds: [ClusterFeed]
    private let log: Log

    private init(outbox: Outbox?, deliveries: [WebhookDelivery], feeds: [ClusterFeed] = [], log: Log) {
        self.outbox = outbox
        self.deliveries = deliveries
        self.feeds = feeds
        self.log = log
    }

    /// The webhooks of a node of a cluster: each delivers the shards it holds the lease of.
    static func make(_ options: Options, cluster: ClusterNode, log: Log) throws(Daemon.StartError) -> Webhooks {
        let (signer, trust) = try Self.signing(options, log: log)
        var deliveries: [WebhookDelivery] = []
        var feeds: [ClusterFeed] = []
        for (n, url) in options.webhooks.enumerated() {
            let target: WebhookTarget
            do { target = try WebhookTarget(url) } catch { throw Daemon.StartError(error.description) }
            let feed = ClusterFeed(number: n + 1, target: target, node: cluster, kinds: options.webhookEvents, limit: options.webhookOutboxBytes, log: log)
            do {
                let delivery = try WebhookDelivery(target: target, number: n + 1, outbox: feed.outbox, cursor: 0, signer: signer, store: nil, log: log,
                                                   trust: trust, isStale: { [weak feed] entry in feed?.isStale(entry) ?? true })
                feed.attach(delivery)
                deliveries.append(delivery)
                feeds.append(feed)
            } catch {
                throw Daemon.StartError("--webhook \(target.shown): \(error)")
            }
            log.info("webhook \(n + 1): \(target.shown), delivered from the engine's history by the node that holds each shard's lease (webhook \(feed.webhook) in the engine)"
                + (signer == nil ? ", unsigned" : ", signed (\(signer!.secrets.count) secret\(signer!.secrets.count == 1 ? "" : "s"))"))
        }
        return Webhooks(outbox: nil, deliveries: deliveries, feeds: feeds, log: log)
    }

    private static func signing(_ options: Options, log: Log) throws(Daemon.StartError) -> (WebhookSigner?, TLSTrust?) {
        var signer: WebhookSigner?
        if let file = options.webhookSecretFile {
            options.warnIfOpenToEveryone(file, "webhook secret") { log.warn($0) }
            do { signer = try WebhookSigner.load(path: file) } catch { throw Daemon.StartError("--webhook-secret-file: \(error)") }
        }
        var trust: TLSTrust?
        if let file = options.webhookCAFile {
            do { trust = try TLSTrust(caFile: file) } catch { throw Daemon.StartError("--webhook-ca-file: \(error)") }
        }
        return (signer, trust)
    }

    /// One delivery per `--webhook`, each from where it stood: its cursor in the state file,
    /// or (a webhook new to this file, or rooms in memory) after the outbox's last event
    /// now, stored at once so that a crash right after loses it nothing.
    static func make(_ options: Options, outbox: Outbox, store: StateStore?, log: Log) async throws(Daemon.StartError) -> Webhooks {
        let (signer, trust) = try Self.signing(options, log: log)
        var cursors: [String: Int] = [:]
        if let store {
            do { cursors = try await store.webhookCursors() } catch { throw Daemon.StartError(error.message) }
        }
        var deliveries: [WebhookDelivery] = []
        for (n, url) in options.webhooks.enumerated() {
            let target: WebhookTarget
            do { target = try WebhookTarget(url) } catch { throw Daemon.StartError(error.description) }
            var cursor = cursors[url]
            if cursor == nil {
                cursor = store == nil ? 0 : outbox.lastPosition
                if let store {
                    do { try await store.saveWebhookCursor(url, position: cursor!) } catch { throw Daemon.StartError(error.message) }
                }
            }
            do {
                deliveries.append(try WebhookDelivery(target: target, number: n + 1, outbox: outbox, cursor: cursor!, signer: signer,
                                                      store: store, log: log, trust: trust))
            } catch {
                throw Daemon.StartError("--webhook \(target.shown): \(error)")
            }
            log.info("webhook \(n + 1): \(target.shown), from outbox position \(cursor! + 1)"
                + (signer == nil ? ", unsigned" : ", signed (\(signer!.secrets.count) secret\(signer!.secrets.count == 1 ? "" : "s"))"))
        }
        return Webhooks(outbox: outbox, deliveries: deliveries, log: log)
    }

    func start() {
        for delivery in deliveries { delivery.start() }
        for feed in feeds { feed.start() }
    }

    /// Reads `--webhook-secret-file` again (SIGHUP): requests from then on are signed with
    /// what it holds (both secrets while one is rotated). A file that cannot be read, or a
    /// secret that is wrong, is said in the log, and the secrets in use stay.
    func reloadSecret(_ path: String?) {
        guard let path, !deliveries.isEmpty else { return }
        do {
            let signer = try WebhookSigner.load(path: path)
            for delivery in deliveries { delivery.sign(with: signer) }
            log.info("received SIGHUP: the webhook secret file read again; requests are signed with \(signer.secrets.count) secret\(signer.secrets.count == 1 ? "" : "s")")
        } catch {
            log.error("received SIGHUP: \(error); the webhook secrets in use stay")
        }
    }

    /// Waits (a few seconds at most) for the requests on their way, and stores where each stands.
    func stop() async {
        // On a cluster: what the deliveries posted until they stopped is this node's to post,
        // then each shard's lease is freed at where its delivery stood.
        for delivery in deliveries { await delivery.stop(timeout: 3) }
        for feed in feeds { await feed.stop() }
        for feed in feeds { feed.release() }
        outbox?.wakeAll()
    }

    /// The outbox's and the webhooks' lines of `/metrics`.
    var metricsText: String {
        var out = ""
        if let f = outbox?.figures {
            out += """
        # HELP tabd_outbox_events Events the outbox holds (what webhooks deliver and GET /api/events streams).
        # TYPE tabd_outbox_events gauge
        tabd_outbox_events \(f.count)
        # HELP tabd_outbox_bytes What they weigh, bounded by --webhook-outbox-bytes.
        # TYPE tabd_outbox_bytes gauge
        tabd_outbox_bytes \(f.bytes)
        # HELP tabd_outbox_position The last position written.
        # TYPE tabd_outbox_position gauge
        tabd_outbox_position \(f.last)
        # HELP tabd_outbox_dropped_total Events dropped, oldest first, past --webhook-outbox-bytes (since tabd started).
        # TYPE tabd_outbox_dropped_total counter
        tabd_outbox_dropped_total \(f.dropped)

        """
        }
        guard !deliveries.isEmpty else { return out }
        if !feeds.isEmpty {
            out += "# HELP tabd_webhook_shards Shards of the cluster whose events this node delivers, by webhook.\n# TYPE tabd_webhook_shards gauge\n"
            out += feeds.map { "tabd_webhook_shards{webhook=\"\($0.number)\"} \($0.shardsHeld)\n" }.joined()
        }
        let lines = deliveries.map { $0.metricsLines() }
        out += "# HELP tabd_webhook_pending Events written after the last one delivered in order, by webhook (its place on the command line).\n"
        out += "# TYPE tabd_webhook_pending gauge\n" + lines.map(\.pending).joined()
        out += "# HELP tabd_webhook_delivered_total Requests answered 2xx.\n# TYPE tabd_webhook_delivered_total counter\n" + lines.map(\.delivered).joined()
        out += "# HELP tabd_webhook_failed_total Requests that failed (no connection, a timeout, or not 2xx); each is tried again.\n"
        out += "# TYPE tabd_webhook_failed_total counter\n" + lines.map(\.failed).joined()
        out += "# HELP tabd_webhook_gaps_total gap events delivered (events dropped past --webhook-outbox-bytes before delivery).\n"
        out += "# TYPE tabd_webhook_gaps_total counter\n" + lines.map(\.gaps).joined()
        out += "# HELP tabd_webhook_request_seconds How long each request took, answered or not.\n"
        out += "# TYPE tabd_webhook_request_seconds histogram\n" + lines.map(\.histogram).joined()
        return out
    }
}
