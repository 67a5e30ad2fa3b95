import Coordinator
import Foundation

/// A `--tabs` file (`TabInfo.load(contentsOf:)`) and what tabd does with it: a new room's
/// coordinator. Never a trap; an accepted list keeps the limits, round-trips through its
/// JSON form, and makes a coordinator unless its ids repeat or it has too many tabs.
enum TabsTarget {
    static let path = (scratchDirectory as NSString).appendingPathComponent("tabs.json")

    static func run(_ bytes: [UInt8]) {
        guard FileManager.default.createFile(atPath: path, contents: Data(bytes)) else { fatalError("cannot write \(path)") }
        let tabs: [TabInfo]
        do { tabs = try TabInfo.load(contentsOf: path) } catch {
            require(error.message.contains(path), "the error does not name the file: \(error.message)")
            return
        }
        require(!tabs.isEmpty, "an empty list was accepted")
        for t in tabs {
            require(!t.id.isEmpty && t.id.unicodeScalars.count <= Limits.maxTabIDLength, "tab id '\(t.id)'")
            require(t.color == t.color.uppercased() && t.color.utf8.count == 7, "color '\(t.color)' not normalized")
            if let b = t.badge { require((1...Limits.maxBadgeLength).contains(b.unicodeScalars.count), "badge '\(b)'") }
        }
        // The list as a tabs file writes it, read again.
        let json = JSONValue.array(tabs.map { t in
            var m: [(String, JSONValue)] = [("id", .string(t.id)), ("title", .string(t.title)), ("icon", .string(t.icon)), ("color", .string(t.color))]
            if let b = t.badge { m.append(("badge", .string(b))) }
            return .object(m)
        })
        do {
            let again = try TabInfo.list(from: try JSONParser.parse(json.compactBytes), source: "again")
            require(again == tabs, "the list does not round-trip")
        } catch { require(false, "the list's own JSON is refused: \(error)") }
        do {
            let coordinator = try Coordinator(tabs: tabs)
            require(coordinator.origin.tabs.map(\.info) == tabs, "the coordinator's tabs are not the file's")
            checkLimits(coordinator.origin, "origin")
        } catch {
            let unique = Set(tabs.map(\.id)).count == tabs.count
            require(!unique || tabs.count > Limits.maxTabs, "a valid list refused: \(error)")
        }
    }
}
