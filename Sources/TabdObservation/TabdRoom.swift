import Foundation
import TabdProtocol
import Observation
import TabdClient

/// One room of a tabd as an observable model on the main actor: what a SwiftUI tab bar
/// binds to.
///
/// ```swift
/// let room = try await TabdRoom.connect(url: "http://127.0.0.1:8080/", room: "main", name: "phone")
/// room.selected            // "home"; views that read it redraw when it changes
/// try await room.tap("profile")
/// for await e in room.firstAppears(on: "profile") { ... }   // onFirstAppear, once per page
/// ```
///
/// **One fold.** Every property follows the room's stream: each batch of events is folded
/// by the same function tabd and ``TabdClient`` fold with (`Snapshot.apply`), and the
/// properties that changed are set; a replaced state (a reconnect that could not resume,
/// a new epoch) replaces them all. Nothing here decides what an event means.
///
/// **No optimistic state.** Intents (``select(_:)``, ``tap(_:)``, ``push(_:on:)``, …) go
/// to tabd; the model changes when tabd's events arrive, and each intent returns once the
/// model holds them. So ``selection`` bound to a `TabView` shows the old tab while a
/// `select` is in flight (one round trip), then the room's.
///
/// **Lifecycle.** ``appears(on:)``, ``firstAppears(on:)``, ``disappears(on:)`` and
/// ``scrollsToTop(on:)`` are the seeds' `onAppear`, `onFirstAppear` and scroll-to-top, fed
/// by the room's events as they happen. What a reconnect replays (the events missed while
/// disconnected) updates the model but fires none of them: they happened while no one
/// was looking.
@MainActor @Observable
public final class TabdRoom {
    /// Where the connection is.
    public enum Connection: Sendable, Equatable {
        /// Welcomed, and every event so far is in the model.
        case live
        /// Welcomed again after a drop; the events missed meanwhile are coming.
        case catchingUp
        /// The connection dropped; the `attempt`th reconnect is under way or waiting.
        case reconnecting(attempt: Int)
        /// For good; the error says why.
        case closed(TabdClientError)
    }

    /// A page's lifecycle event, as it happened in the room.
    public struct PageEvent: Sendable, Equatable {
        public let tab: TabID
        public let page: PageID
        /// The page's route (for a page a pop took away, its route before the pop); nil only
        /// for a page the model never held.
        public let route: String?
        /// The event's seq in the room's history.
        public let seq: Int
        /// The client that caused it (`tabd` for the daemon's own).
        public let by: ClientID

        func matches(_ tab: TabID?, _ page: PageID?) -> Bool { (tab == nil || self.tab == tab) && (page == nil || self.page == page) }
    }

    /// A scroll-to-top, as it happened: the room's counter moved to `count` for `tab`.
    public struct ScrollToTop: Sendable, Equatable {
        public let tab: TabID
        public let count: Int
        public let seq: Int
        public let by: ClientID
    }

    // MARK: The room

    /// The room's tabs in the bar's order: each one's look (`info`: title, icon, color,
    /// badge), its page stack (`stack`, the top last), its scroll offset and the values
    /// kept on it.
    public private(set) var tabs: [TabState] = []
    /// The selected tab, as tabd has it.
    public private(set) var selected: TabID = ""
    /// The room's one scroll-to-top counter, shared by every tab (the seeds'
    /// `ValuesModel.count`): it moves by one at each scroll-to-top.
    public private(set) var scrollToTop = 0
    /// The tab the counter last moved for; nil until it moves (or after the state was
    /// replaced).
    public private(set) var scrolledToTop: TabID?
    /// The connected clients (a counted room lists none: see ``clientCount``).
    public private(set) var clients: [ClientInfo] = []
    /// How many clients are connected.
    public private(set) var clientCount = 0
    /// The last seq folded.
    public private(set) var seq = 0
    /// Where the connection is.
    public private(set) var connection: Connection = .live
    /// This connection's session: client id, room, role (`view` may only read), epoch.
    public private(set) var session: TabdClient.Session

    /// The selection, for a binding: reads the room's, and setting it asks tabd to select
    /// that tab (the read changes once tabd has). A refusal leaves it as it was and is
    /// kept in ``bindingError`` for the view to show.
    public var selection: TabID {
        get { selected }
        set {
            guard newValue != selected else { return }
            Task { await self.bound { try await self.select(newValue) } }
        }
    }

    /// Why the last intent made through a binding (``selection``) failed: a refusal
    /// (`forbidden` for a view token, `unknown_tab`, …) or a dropped connection. Cleared by
    /// the next one that succeeds; a view may set it to nil once it has shown it.
    public var bindingError: TabdClientError?

    /// Runs a binding's intent, keeping its failure in ``bindingError``.
    private func bound(_ intent: () async throws -> Void) async {
        do {
            try await intent()
            bindingError = nil
        } catch let error as TabdClientError {
            bindingError = error
        } catch {
            // Cancelled: the binding's task ended; nothing to show.
        }
    }

    /// The tab with this id.
    public func tab(_ id: TabID) -> TabState? { tabs.first { $0.id == id } }

    /// The client the model follows (for what the model does not offer: `sync`, `clients`,
    /// `set`, the tab bar's commands).
    public nonisolated let client: TabdClient

    // MARK: Following

    /// The fold's own copy of the state.
    @ObservationIgnored private var state: Snapshot
    /// Between a resumed welcome and its catch-up: events are replays.
    @ObservationIgnored private var replaying = false
    /// A batch did not fold here: the client's state is on its way (``resync()``).
    @ObservationIgnored private var resyncing = false
    @ObservationIgnored private var listeners: [Int: Listener] = [:]
    @ObservationIgnored private var nextListener = 0
    /// Intents waiting for the model to hold their seq.
    @ObservationIgnored private var seqWaiters: [(seq: Int, resume: CheckedContinuation<Void, Never>)] = []
    @ObservationIgnored private var following: Task<Void, Never>?
    /// False once the room's stream has ended (the client closed).
    @ObservationIgnored private var isFollowing = true

    private struct Listener {
        let yield: @Sendable (Happening) -> Void
        let finish: @Sendable () -> Void
    }

    /// What listeners hear.
    private enum Happening: Sendable {
        case appear(PageEvent), firstAppear(PageEvent), disappear(PageEvent), scrollToTop(ScrollToTop)
    }

    /// Connects to a room of `url` (as ``TabdClient/connect(url:room:token:name:options:)``)
    /// and follows it; returns once the model holds the room's state.
    public static func connect(url: URL, room: RoomID? = nil, token: String? = nil, name: String? = nil,
                               options: TabdClient.Options = .init()) async throws(TabdClientError) -> TabdRoom {
        try await connect(url: url.absoluteString, room: room, token: token, name: name, options: options)
    }

    /// The same, with the URL as text (`http://HOST:PORT/` as tabd prints it).
    public static func connect(url: String, room: RoomID? = nil, token: String? = nil, name: String? = nil,
                               options: TabdClient.Options = .init()) async throws(TabdClientError) -> TabdRoom {
        let client = try await TabdClient.connect(url: url, room: room, token: token, name: name, options: options)
        return await TabdRoom(following: client)
    }

    /// Follows the room of a connected `client`; returns once the model holds its state.
    public init(following client: TabdClient) async {
        self.client = client
        let (updates, session, current, catchingUp) = await client.follow()
        self.session = session
        // Catching up: the stream's `connected(resumed: true)` after its snapshot says so
        // too, and the replays follow it.
        replaying = catchingUp
        switch current {
        case .connected: connection = catchingUp ? .catchingUp : .live
        case let .reconnecting(attempt): connection = .reconnecting(attempt: attempt)
        case let .closed(error): connection = .closed(error)
        }
        // The stream's first update is the client's state as of the subscription: the model
        // starts there, and every later update follows on it.
        var iterator = updates.makeAsyncIterator()
        if case let .snapshot(first)? = await iterator.next(isolation: #isolation) { state = first } else { state = await client.state }
        show(state, replaced: true)
        following = Task { [weak self, iterator] in
            var rest = iterator
            while let update = await rest.next(isolation: #isolation) {
                guard let self else { return }
                self.take(update)
            }
            self?.ended()
        }
    }

    /// Closes the client (see ``TabdClient/close()``); the model keeps the last state.
    public func close() async {
        await client.close()
        await following?.value
    }

    // MARK: Intents

    /// Selects `tab`.
    public func select(_ tab: TabID) async throws { try await reflect(client.select(tab)) }
    /// A tap on `tab`'s item, as a native tab bar: selects it; on the selected tab pops it
    /// to its first page; at the first page scrolls it to the top (the counter moves).
    public func tap(_ tab: TabID) async throws { try await reflect(client.tap(tab)) }
    /// Pushes a page with `route` onto `tab` (default: the selected tab).
    public func push(_ route: String, on tab: TabID? = nil) async throws { try await reflect(client.push(route, on: tab)) }
    /// Pops the top page of `tab` (default: the selected tab).
    public func pop(on tab: TabID? = nil) async throws { try await reflect(client.pop(on: tab)) }
    /// Records where `tab`'s (default: the selected tab's) list is scrolled to.
    public func scroll(to offset: Double, on tab: TabID? = nil) async throws {
        try await reflect(client.scroll(to: offset, on: tab))
    }
    /// Any other command (a pop to the root, a value set, the bar's own), through tabd, as the
    /// intents above: it returns once the model holds its events.
    public func perform(_ command: Command) async throws { try await reflect(client.perform(command)) }

    /// Waits until the model holds `seq` (a command's ack): the client has folded it and
    /// handed it to this model's stream, which may not have been read yet.
    private func reflect(_ seq: Int) async {
        // The client returns an ack only once its state holds the seq, so the seq is on its
        // way in the stream. Should it not hold it, the model could not get there sooner
        // than the client: the intent returns now rather than wait for nothing.
        guard self.seq < seq, isFollowing, await client.state.seq >= seq, self.seq < seq, isFollowing else { return }
        await withCheckedContinuation { seqWaiters.append((seq, $0)) }
    }

    // MARK: Lifecycle

    /// The pages of `tab` (nil: every tab; `page`: that page only) that appear, as they do.
    public func appears(on tab: TabID? = nil, page: PageID? = nil) -> AsyncStream<PageEvent> {
        listen { if case let .appear(e) = $0, e.matches(tab, page) { e } else { nil } }
    }

    /// The pages of `tab` (nil: every tab; `page`: that page only) that appear for the
    /// first time: once per page, whatever pushes, pops and tab switches follow.
    public func firstAppears(on tab: TabID? = nil, page: PageID? = nil) -> AsyncStream<PageEvent> {
        listen { if case let .firstAppear(e) = $0, e.matches(tab, page) { e } else { nil } }
    }

    /// The pages of `tab` (nil: every tab; `page`: that page only) that stop being the
    /// visible page.
    public func disappears(on tab: TabID? = nil, page: PageID? = nil) -> AsyncStream<PageEvent> {
        listen { if case let .disappear(e) = $0, e.matches(tab, page) { e } else { nil } }
    }

    /// The scroll-to-tops of `tab` (nil: every tab).
    public func scrollsToTop(on tab: TabID? = nil) -> AsyncStream<ScrollToTop> {
        listen { if case let .scrollToTop(e) = $0, tab == nil || e.tab == tab { e } else { nil } }
    }

    private func listen<T: Sendable>(_ pick: @escaping @Sendable (Happening) -> T?) -> AsyncStream<T> {
        let (stream, continuation) = AsyncStream.makeStream(of: T.self)
        if case .closed = connection {
            continuation.finish()
            return stream
        }
        let id = nextListener
        nextListener += 1
        listeners[id] = Listener(yield: { if let t = pick($0) { continuation.yield(t) } }, finish: { continuation.finish() })
        continuation.onTermination = { [weak self] _ in Task { @MainActor in self?.listeners[id] = nil } }
        return stream
    }

    // MARK: Taking updates

    private func take(_ update: TabdClient.Update) {
        switch update {
        case let .snapshot(snapshot):
            state = snapshot
            show(state, replaced: true)
            // Whatever an intent waited for, the room's state is this one now.
            releaseWaiters(all: true)
        case let .events(batch):
            guard batch.lastSeq > state.seq else { return }
            guard !resyncing else { return } // the client's state, asked for, holds it
            let before = state
            do { try state.apply(batch) } catch {
                // The client folded it already, so this should not happen (this model skipped
                // a batch, or a bug): not a reason to stop the app. The model takes the
                // client's state instead, which holds this batch and every one before.
                resync()
                return
            }
            show(state, replaced: false)
            for e in batch.events { if case let .scrollToTop(tab, _) = e.event, scrolledToTop != tab { scrolledToTop = tab } }
            if !replaying { announce(batch, before: before) }
        case let .connected(session, resumed):
            self.session = session
            replaying = resumed
            connection = resumed ? .catchingUp : .live
        case .caughtUp:
            replaying = false
            connection = .live
        case .disconnected:
            break // `reconnecting` or `closed` follows
        case let .reconnecting(attempt, _):
            connection = .reconnecting(attempt: attempt)
        case let .closed(error):
            connection = .closed(error)
            releaseWaiters(all: true)
        }
        releaseWaiters(all: false)
    }

    /// Replaces the model's state with the client's (which holds every batch handed to this
    /// model's stream so far); batches until then are skipped.
    private func resync() {
        resyncing = true
        Task { [weak self] in
            guard let self else { return }
            let current = await self.client.state
            self.resyncing = false
            if current.seq >= self.state.seq {
                self.state = current
                self.show(current, replaced: true)
            }
            self.releaseWaiters(all: false)
        }
    }

    private func ended() {
        isFollowing = false
        for listener in listeners.values { listener.finish() }
        listeners = [:]
        releaseWaiters(all: true)
    }

    /// Sets the properties that differ from `s` (so a view that reads one redraws only when
    /// it changes).
    private func show(_ s: Snapshot, replaced: Bool) {
        if tabs != s.tabs { tabs = s.tabs }
        if selected != s.selected { selected = s.selected }
        if scrollToTop != s.scrollToTop { scrollToTop = s.scrollToTop }
        if clients != s.clients { clients = s.clients }
        if clientCount != s.clientCount { clientCount = s.clientCount }
        if seq != s.seq { seq = s.seq }
        if replaced, scrolledToTop != nil { scrolledToTop = nil }
    }

    /// Tells the listeners what `batch` did, live. A page's route is read from the state
    /// after the batch (a popped page's, from the state before it).
    private func announce(_ batch: EventBatch, before: Snapshot) {
        for e in batch.events {
            let happening: Happening
            func page(_ tab: TabID, _ page: PageID) -> PageEvent {
                let route = state.tab(tab)?.stack.first { $0.id == page }?.route ?? before.tab(tab)?.stack.first { $0.id == page }?.route
                return PageEvent(tab: tab, page: page, route: route, seq: e.seq, by: batch.by)
            }
            switch e.event {
            case let .appear(tab, p): happening = .appear(page(tab, p))
            case let .firstAppear(tab, p): happening = .firstAppear(page(tab, p))
            case let .disappear(tab, p): happening = .disappear(page(tab, p))
            case let .scrollToTop(tab, count): happening = .scrollToTop(ScrollToTop(tab: tab, count: count, seq: e.seq, by: batch.by))
            default: continue
            }
            for listener in listeners.values { listener.yield(happening) }
        }
    }

    /// Resumes the intents whose seq the model holds (`all`: every one).
    private func releaseWaiters(all: Bool) {
        guard !seqWaiters.isEmpty else { return }
        let due = seqWaiters.filter { all || $0.seq <= seq }
        seqWaiters.removeAll { all || $0.seq <= seq }
        for w in due { w.resume.resume() }
    }
}
