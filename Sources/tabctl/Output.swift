import TabdClient

/// How tabctl writes: readable lines (coloured on a terminal) or JSON lines.
struct Output {
    let json: Bool
    let colour: Bool

    // MARK: Events

    /// One line for one event of a batch.
    func line(_ e: SequencedEvent, of batch: EventBatch, tabs: [TabState]) -> String {
        if json {
            guard case var .object(members) = e.json else { return e.json.compactString }
            members += [("by", .string(batch.by)), ("ref", .string(batch.ref))]
            return JSONValue.object(members).compactString
        }
        func tab(_ id: TabID) -> String { paint(id, hex: tabs.first { $0.id == id }?.info.color) }
        let what: String
        switch e.event {
        case let .selected(from, to): what = "\(tab(from)) → \(tab(to))"
        case let .firstAppear(t, p), let .appear(t, p), let .disappear(t, p): what = "\(tab(t)) page \(p)"
        case let .pushed(t, p, route): what = "\(tab(t)) page \(p) route \(quoted(route))"
        case let .popped(t, pages): what = "\(tab(t)) pages \(pages.joined(separator: ", "))"
        case let .scrollToTop(t, count): what = "\(tab(t)) count \(count)"
        case let .scrolled(t, offset): what = "\(tab(t)) offset \(number(offset))"
        case let .valueSet(t, key, value): what = "\(tab(t)) \(quoted(key)) = \(value.compactString)"
        case let .tabAdded(t, index): what = "\(paint(t.id, hex: t.info.color)) \(quoted(t.info.title)) at \(index)"
        case let .tabUpdated(t): what = "\(paint(t.id, hex: t.info.color)) \(quoted(t.info.title)) \(t.info.icon) \(t.info.color)"
            + (t.info.badge.map { " badge \(quoted($0))" } ?? "")
        case let .tabMoved(t, index): what = "\(tab(t)) to \(index)"
        case let .tabRemoved(t): what = tab(t)
        case let .clientJoined(c): what = c.name.isEmpty ? c.id : "\(c.id) \(quoted(c.name))"
        case let .clientLeft(c): what = c
        case let .presenceCounted(count, nodes): what = "\(count) online, counted from here on" + Self.shares(nodes)
        case let .clientCount(node, count): what = node.map { "\(count) online on node \($0)" } ?? "\(count) online"
        case let .presenceListed(node, clients):
            what = "listed again" + (clients.isEmpty ? "" : ": " + clients.map(\.id).joined(separator: ", ")) + (node.map { " (node \($0))" } ?? "")
        case let .clientIdsReserved(node, from, count): what = "c\(from)…c\(from + count - 1)" + (node.map { " for node \($0)" } ?? "")
        }
        let kind = e.event.kind.padding(12)
        let by = batch.by + (batch.ref.map { " ref \($0)" } ?? "")
        return "\(String(e.seq).leftPadding(6))  \(colour ? bold(kind) : kind) \(what)  \(dim("by \(by)"))"
    }

    // MARK: State

    func state(_ s: Snapshot, session: TabdClient.Session) -> String {
        if json {
            return JSONValue.object([("room", .string(session.room)), ("epoch", .string(session.epoch)), ("snapshot", s.json)]).compactString
        }
        return describe(s, room: session.room, epoch: session.epoch)
    }

    func describe(_ s: Snapshot, room: String, epoch: String) -> String {
        var lines = ["room \(room)  seq \(s.seq)  epoch \(epoch)  scroll-to-top count \(s.scrollToTop)"]
        let idWidth = s.tabs.map(\.id.count).max() ?? 0
        let titleWidth = s.tabs.map(\.info.title.count).max() ?? 0
        for t in s.tabs {
            let mark = t.id == s.selected ? "●" : " "
            var line = "\(mark) \(paint(t.id.padding(idWidth), hex: t.info.color))  \(t.info.title.padding(titleWidth))  \(t.info.icon)"
            if let badge = t.info.badge { line += " [\(badge)]" }
            lines.append(line)
            lines.append("    stack  " + t.stack.map { p in "\(p.route) (\(p.id)\(p.appeared ? "" : ", not yet appeared"))" }.joined(separator: " › "))
            if t.scroll != 0 { lines.append("    scroll \(number(t.scroll))") }
            for (key, value) in t.values.sorted(by: { $0.key < $1.key }) { lines.append("    \(quoted(key)) = \(value.compactString)") }
        }
        if s.presence == .counted {
            lines.append("clients: \(s.clientCount) online (counted\(Self.shares(s.nodes)); 'tabctl clients' lists them)")
        } else {
            let names = s.clients.map { $0.name.isEmpty ? $0.id : "\($0.id) \(quoted($0.name))" }
            let more = s.clientCount > s.clients.count ? " and \(s.clientCount - s.clients.count) more" : ""
            lines.append("clients (\(s.clientCount)): " + names.joined(separator: ", ") + more)
        }
        return lines.joined(separator: "\n")
    }

    /// One line per client of a `clients` page (JSON: the client object).
    func clients(_ page: ClientPage) -> [String] {
        page.clients.map { c in json ? c.json.compactString : (c.name == c.id ? c.id : "\(c.id) \(quoted(c.name))") }
    }

    // MARK: Pieces

    /// `; by node: a 3, b 5` for a cluster's per-node counts.
    static func shares(_ nodes: [String: Int]?) -> String {
        guard let nodes, !nodes.isEmpty else { return "" }
        return "; by node: " + nodes.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
    }

    /// `text` in the colour `#RRGGBB`, on a terminal.
    func paint(_ text: String, hex: String?) -> String {
        guard colour, let hex, hex.count == 7, hex.hasPrefix("#"), let rgb = Int(hex.dropFirst(), radix: 16) else { return text }
        return "\u{1B}[1;38;2;\(rgb >> 16);\((rgb >> 8) & 255);\(rgb & 255)m\(text)\u{1B}[0m"
    }

    func bold(_ text: String) -> String { colour ? "\u{1B}[1m\(text)\u{1B}[0m" : text }
    func dim(_ text: String) -> String { colour ? "\u{1B}[2m\(text)\u{1B}[0m" : text }

    func quoted(_ s: String) -> String { JSONValue.string(s).compactString }

    func number(_ d: Double) -> String { JSONValue.double(d).compactString }
}

extension String {
    func padding(_ width: Int) -> String { count >= width ? self : self + String(repeating: " ", count: width - count) }
    func leftPadding(_ width: Int) -> String { count >= width ? self : String(repeating: " ", count: width - count) + self }
}
