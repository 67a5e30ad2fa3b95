import Auth
import Coordinator
import FoundationEssentials
import Glibc
import Dispatch
import Locking
import Outbox
import StateStore
import WebSocketsClient

/// One webhook's delivery: threads of its own post the outbox's events to its URL, each
/// until it is answered 2xx, in order per room (``DeliveryPlan``), retrying with backoff
/// while the receiver is down, slow or failing.
///
/// Nothing here slows a room: the rooms only write the outbox; a receiver that never
/// answers holds these threads (each request bounded by ``requestTimeout``) and nothing
/// else, and what waits for it is the outbox's, bounded there.
final class WebhookDelivery: @unchecked Sendable {
    // @unchecked Sendable: `plan` and the counters are touched with `condition` locked.

    /// Requests on their way at once, to different rooms.
    static let threads = 8
    /// Seconds a connection may take, then each write or read of the exchange, before it
    /// counts as failed.
    static let connectTimeout = 5
    static let requestTimeout = 15
    /// Seconds the whole exchange may take (a receiver that answers a byte at a time).
    static let exchangeTimeout = 30.0
    /// The longest wait between two tries of an event.
    static let maxBackoff = 10.0
    /// Bytes of an answer read (the rest is not: only its status matters).
    static let answerBytes = 16 * 1024
    /// Seconds between two writes of the cursor to the state file.
    static let cursorEvery = 1.0
    /// Buckets of `tabd_webhook_request_seconds`.
    static let buckets: [Double] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

    let target: WebhookTarget
    /// Its number on the command line (1, 2, …): the metrics' label.
    let number: Int
    private let outbox: Outbox
    /// Changed by SIGHUP (``sign(with:)``); read with `condition` locked.
    private var signer: WebhookSigner?
    private let store: StateStore?
    private let log: Log
    private let tls: TLSTrust?
    /// Whether an event is no longer this node's to post (a cluster's shard another node
    /// took over): passed as if delivered.
    private let isStale: (@Sendable (Outbox.Entry) -> Bool)?

    private let condition = ThreadCondition()
    private var plan: DeliveryPlan
    private var stopping = false
    private var running = 0
    private var savedCursor: Int
    private var savedAt = Date.distantPast
    private var delivered = 0
    private var failed = 0
    private var gapsTold = 0
    private var histogram = [Int](repeating: 0, count: WebhookDelivery.buckets.count + 1)
    private var seconds = 0.0

    init(target: WebhookTarget, number: Int, outbox: Outbox, cursor: Int, signer: WebhookSigner?, store: StateStore?, log: Log,
         trust: TLSTrust?, isStale: (@Sendable (Outbox.Entry) -> Bool)? = nil) throws {
        self.isStale = isStale
        self.target = target
        self.number = number
        self.outbox = outbox
        self.signer = signer
        self.store = store
        self.log = log
        plan = DeliveryPlan(cursor: cursor)
        savedCursor = cursor
        tls = target.https ? trust ?? .system : nil
    }

    func start() {
        condition.lock()
        running = Self.threads
        condition.unlock()
        for n in 0..<Self.threads {
            Threads.start(name: "tabd-webhook-\(number)-\(n)") { [self] in work() }
        }
    }

    /// Stops taking jobs; waits (at most `timeout` seconds) for the requests on their way,
    /// then stores the cursor.
    func stop(timeout: Double) async {
        locked {
            stopping = true
            condition.broadcast()
        }
        outbox.wakeAll()
        let deadline = Date(timeIntervalSinceNow: timeout)
        while true {
            let left = locked { running }
            if left == 0 || Date() > deadline { break }
            try? await Task.sleep(for: .milliseconds(20))
        }
        await saveCursor(force: true)
    }

    // MARK: The threads

    private func work() {
        defer {
            condition.lock()
            running -= 1
            condition.unlock()
        }
        while let job = nextJob() {
            var attempt = 0
            while true {
                attempt += 1
                if case let .event(entry) = job, let isStale, isStale(entry) { break }
                if post(job) { break }
                // Down, slow or failing: again after a while (interrupted by a stop).
                let delay = min(Self.maxBackoff, 0.25 * pow(2, Double(min(attempt - 1, 10)))) * Double.random(in: 0.5...1)
                condition.lock()
                if !stopping { _ = condition.wait(seconds: delay) }
                let stop = stopping
                condition.unlock()
                if stop { return }
            }
            condition.lock()
            plan.delivered(job)
            condition.broadcast() // a room it held may be free for another thread now
            let due = store != nil && plan.cursor != savedCursor && Date().timeIntervalSince(savedAt) >= Self.cursorEvery
            condition.unlock()
            if due { Task { await saveCursor(force: false) } }
        }
    }

    /// The next job, waiting for one; nil once stopping.
    private func nextJob() -> DeliveryPlan.Job? {
        while true {
            condition.lock()
            if stopping {
                condition.unlock()
                return nil
            }
            if let job = plan.next(from: outbox) {
                condition.unlock()
                return job
            }
            // Nothing ready: wait for a room to be freed or for news (checked again each second).
            _ = condition.wait(seconds: 0.05)
            condition.unlock()
            _ = outbox.waitForNews(after: outbox.lastPosition, timeout: 0.25)
        }
    }

    /// One try: true when the receiver answered 2xx.
    private func post(_ job: DeliveryPlan.Job) -> Bool {
        let (id, body): (String, [UInt8])
        switch job {
        case let .event(entry): (id, body) = (entry.key ?? "\(outbox.id)-\(entry.position)", entry.body)
        case let .gap(range):
            (id, body) = ("\(outbox.id)-gap-\(range.lowerBound)-\(range.upperBound)",
                          OutboxEvent.gap(from: range.lowerBound, through: range.upperBound, outbox: outbox.id, time: Date().timeIntervalSince1970))
        }
        var headers: [(String, String)] = [("User-Agent", "tabd/\(Options.version)")]
        let now = Int(Date().timeIntervalSince1970)
        let signer = locked { self.signer }
        headers += signer?.headers(id: id, timestamp: now, body: body)
            ?? [("webhook-id", id), ("webhook-timestamp", String(now))]
        let call = HTTPCall(method: "POST", host: target.host, port: target.port, path: target.target, body: body, headers: headers, tls: tls)
        let started = ContinuousClock.now
        let outcome: Result<Int, HTTPCall.Failure>
        do throws(HTTPCall.Failure) {
            outcome = .success(try call.send(timeoutSeconds: Self.requestTimeout, connectTimeoutSeconds: Self.connectTimeout,
                                              totalSeconds: Self.exchangeTimeout, maxAnswerBytes: Self.answerBytes).status)
        } catch {
            outcome = .failure(error)
        }
        let took = (ContinuousClock.now - started) / .seconds(1)
        let ok = (try? outcome.get()).map { (200..<300).contains($0) } ?? false
        condition.lock()
        seconds += took
        histogram[Self.buckets.firstIndex { took <= $0 } ?? Self.buckets.count] += 1
        if ok {
            delivered += 1
            if case .gap = job { gapsTold += 1 }
        } else {
            failed += 1
        }
        let failures = failed
        condition.unlock()
        if !ok, failures == 1 || failures % 100 == 0 {
            let why = switch outcome {
            case let .success(status): "answered \(status)"
            case let .failure(error): error.description
            }
            log.info("webhook \(number) (\(target.shown)): \(id) not delivered (\(why)); \(failures) failed tries so far, tried again")
        }
        return ok
    }

    /// Writes the cursor to the state file when it moved (at most once a second unless `force`).
    private func saveCursor(force: Bool) async {
        guard let store else { return }
        let (cursor, due) = locked { () -> (Int, Bool) in
            let cursor = plan.cursor
            let due = cursor != savedCursor && (force || Date().timeIntervalSince(savedAt) >= Self.cursorEvery)
            if due {
                savedCursor = cursor
                savedAt = Date()
            }
            return (cursor, due)
        }
        guard due else { return }
        do { try await store.saveWebhookCursor(target.url, position: cursor) } catch {
            log.error("webhook \(number): its position could not be stored: \(error.message)", LogFields(kind: "webhook"))
        }
    }

    /// Everything up to this outbox position is delivered (or passed).
    var cursor: Int { locked { plan.cursor } }

    /// Signs the requests from now on with `signer`'s secrets.
    func sign(with signer: WebhookSigner) {
        locked { self.signer = signer }
    }

    /// `body` with `condition` locked (a function of its own: async code may not lock).
    private func locked<T>(_ body: () -> T) -> T {
        condition.lock()
        defer { condition.unlock() }
        return body()
    }

    // MARK: Figures

    /// `/metrics` lines of this webhook (label `webhook="N"`, its number on the command line).
    func metricsLines() -> (pending: String, delivered: String, failed: String, gaps: String, histogram: String) {
        condition.lock()
        let (cursor, delivered, failed, gaps, histogram, seconds) = (plan.cursor, self.delivered, self.failed, gapsTold, self.histogram, self.seconds)
        condition.unlock()
        let label = "webhook=\"\(number)\""
        var lines = ""
        var cumulative = 0
        for (n, bound) in Self.buckets.enumerated() {
            cumulative += histogram[n]
            lines += "tabd_webhook_request_seconds_bucket{\(label),le=\"\(bound)\"} \(cumulative)\n"
        }
        cumulative += histogram[Self.buckets.count]
        lines += "tabd_webhook_request_seconds_bucket{\(label),le=\"+Inf\"} \(cumulative)\n"
        lines += "tabd_webhook_request_seconds_sum{\(label)} \(seconds)\n"
        lines += "tabd_webhook_request_seconds_count{\(label)} \(cumulative)\n"
        return ("tabd_webhook_pending{\(label)} \(max(0, outbox.lastPosition - cursor))\n",
                "tabd_webhook_delivered_total{\(label)} \(delivered)\n",
                "tabd_webhook_failed_total{\(label)} \(failed)\n",
                "tabd_webhook_gaps_total{\(label)} \(gaps)\n",
                lines)
    }
}
