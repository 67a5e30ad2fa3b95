import ArgumentParsing
import Foundation
import Synchronization
import TabdClient
import TabdLoad
import WebSocketsClient

/// Memory per room: rooms `bench-0…` created over tabd's HTTP API step by step (each with
/// `--room-commands` `set` commands), the server's RSS read at each step, and the
/// least-squares slope of RSS over the number of rooms. With `--unload`, each step waits until
/// tabd reports no room loaded (`tabd_rooms_loaded` in `/metrics`; tabd with a short
/// `--room-idle`): the memory a stored, unloaded room costs.
enum RoomMemoryRun {
    struct Point {
        var rooms: Int
        var rssKiB: Int
        var loaded: Int?
        var stored: Int?
    }

    static func run(_ options: BenchOptions) async throws -> Int32 {
        guard let steps = options.roomSteps, let pid = options.pid else {
            throw UsageError("--room-steps needs --pid (the server whose memory is measured)")
        }
        let server = ProcessStats(pid: pid)
        let url = options.url!
        var points: [Point] = []
        var created = 0
        var failures: [String] = []
        let started = monotonicNanos()
        var requestSeconds = 0.0
        for step in steps {
            if step > created {
                let t0 = monotonicNanos()
                failures += await create(rooms: created..<step, options: options)
                requestSeconds += Double(monotonicNanos() - t0) / 1e9
                created = step
                guard failures.isEmpty else { break }
            }
            if options.unload {
                let unloaded = await wait(seconds: 120) { (try? metrics(url))?.loaded == 0 }
                if !unloaded { failures.append("rooms still loaded 120 s after step \(step)") }
            }
            await sleep(seconds: options.settle)
            guard let rss = server.rssKiB() else { throw RunFailure(description: "cannot read /proc/\(pid)/status") }
            let m = try? metrics(url)
            points.append(Point(rooms: step, rssKiB: rss, loaded: m?.loaded, stored: m?.stored))
            log(options, "\(step) rooms: server RSS \(rss) KiB, loaded \(m?.loaded.map(String.init) ?? "?"), stored \(m?.stored.map(String.init) ?? "?")")
        }
        let slope = leastSquaresSlope(points.map { (Double($0.rooms), Double($0.rssKiB)) })
        // Without the step from no room: the first rooms also bring the high-water mark of the
        // rooms loaded while they were made, which malloc keeps (it matters with --unload).
        let later = points.drop { $0.rooms == 0 }
        let laterSlope = later.count >= 2 ? leastSquaresSlope(later.map { (Double($0.rooms), Double($0.rssKiB)) }) : nil
        let requests = created * (1 + options.roomCommands)

        var summary = Summary()
        for p in points {
            summary.add("\(p.rooms) rooms", "\(format(Double(p.rssKiB) / 1024, 1)) MiB (loaded \(p.loaded.map(String.init) ?? "?"), stored \(p.stored.map(String.init) ?? "?"))")
        }
        summary.add("per room", "\(format(slope * 1024, 0)) bytes (least-squares slope of RSS)"
                    + (laterSlope.map { ", \(format($0 * 1024, 0)) bytes from \(later.first!.rooms) rooms on" } ?? ""))
        summary.add("requests", "\(grouped(requests)) (\(options.roomCommands) command\(options.roomCommands == 1 ? "" : "s") per room) in \(format(requestSeconds, 1)) s"
                    + (requestSeconds > 0 ? ", \(format(Double(requests) / requestSeconds, 0))/s" : ""))
        summary.add("problems", failures.isEmpty ? "none" : failures.prefix(5).joined(separator: "; "))
        let mode = options.unload ? "stored, unloaded rooms" : "loaded rooms without clients"
        summary.print(title: "tabbench\(options.label.map { " [\($0)]" } ?? ""): memory of \(mode), tabd (pid \(pid)) at \(url)")
        summary.json = [
            "label": options.label ?? "", "unload": options.unload, "room_commands": options.roomCommands,
            "steps": points.map { ["rooms": $0.rooms, "rss_kib": $0.rssKiB, "loaded": $0.loaded ?? -1, "stored": $0.stored ?? -1] },
            "bytes_per_room": slope * 1024, "bytes_per_room_after_first_step": laterSlope.map { $0 * 1024 } ?? -1, "requests": requests, "request_seconds": requestSeconds,
            "seconds": Double(monotonicNanos() - started) / 1e9, "errors": failures.count, "error_text": failures.prefix(5).joined(separator: "; "),
        ]
        try summary.write(to: options.json)
        return failures.isEmpty ? 0 : 1
    }

    /// Creates rooms `bench-i` for every i in `range` (PUT, then the `set` commands), with
    /// `--http-concurrency` requests in flight; the failures, at most a few.
    private static func create(rooms range: Range<Int>, options: BenchOptions) async -> [String] {
        let next = Atomic<Int>(range.lowerBound)
        let failures = Mutex<[String]>([])
        let url = options.url!
        let commands = options.roomCommands
        let workers = options.httpConcurrency
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                DispatchQueue.concurrentPerform(iterations: workers) { _ in
                    while true {
                        let i = next.wrappingAdd(1, ordering: .relaxed).oldValue
                        guard i < range.upperBound, failures.withLock({ $0.isEmpty }) else { return }
                        let room = RoomLayout.name(i)
                        do {
                            let put = try HTTPCall(method: "PUT", host: url.host, port: url.port, path: "/api/rooms/\(room)").send()
                            guard put.status == 201 else { throw HTTPCall.Failure(description: "PUT \(room): \(put.status) \(put.body)") }
                            for c in 0..<commands {
                                let body = #"{"type":"set","ref":"b\#(c)","tab":"home","key":"k\#(c)","value":"value \#(c) of \#(room)"}"#
                                let post = try HTTPCall(method: "POST", host: url.host, port: url.port,
                                                           path: "/api/rooms/\(room)/commands", body: Array(body.utf8)).send()
                                guard post.status == 200 else { throw HTTPCall.Failure(description: "POST \(room): \(post.status) \(post.body)") }
                            }
                        } catch {
                            failures.withLock { if $0.count < 5 { $0.append("\(error)") } }
                        }
                    }
                }
                done.resume()
            }
        }
        return failures.withLock { $0 }
    }

    /// `tabd_rooms_loaded` and `tabd_rooms_stored` from `/metrics`.
    static func metrics(_ url: WebSocketURL) throws -> (loaded: Int?, stored: Int?) {
        let r = try HTTPCall(method: "GET", host: url.host, port: url.port, path: "/metrics").send()
        func value(_ name: String) -> Int? {
            r.body.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap { Int($0.split(separator: " ").last ?? "") }
        }
        return (value("tabd_rooms_loaded"), value("tabd_rooms_stored"))
    }

    /// The slope b of the least-squares line y = a + b·x.
    static func leastSquaresSlope(_ points: [(Double, Double)]) -> Double {
        let n = Double(points.count)
        let sx = points.reduce(0.0) { $0 + $1.0 }, sy = points.reduce(0.0) { $0 + $1.1 }
        let sxx = points.reduce(0.0) { $0 + $1.0 * $1.0 }, sxy = points.reduce(0.0) { $0 + $1.0 * $1.1 }
        return n * sxx - sx * sx == 0 ? 0 : (n * sxy - sx * sy) / (n * sxx - sx * sx)
    }
}
