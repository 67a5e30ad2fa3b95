import FoundationEssentials
import Glibc
import Dispatch

extension TabInfo {
    /// Reads a tab list file (see ``list(from:source:)``).
    public static func load(contentsOf path: String) throws(WireError) -> [TabInfo] {
        guard let data = FileManager.default.contents(atPath: path) else { throw WireError("cannot read tabs file '\(path)'") }
        let json: JSONValue
        do { json = try JSONParser.parse([UInt8](data)) } catch { throw WireError("tabs file '\(path)' is not JSON: \(error)") }
        return try list(from: json, source: "tabs file '\(path)'")
    }

    /// A tab list: a JSON array of `{"id","title","icon","color","badge"?}` objects, or an
    /// object with such an array under `"tabs"`. Each tab is checked against the limits;
    /// the error names `source`, the tab and why.
    public static func list(from json: JSONValue, source: String) throws(WireError) -> [TabInfo] {
        guard let list = (json["tabs"] ?? json).arrayValue else {
            throw WireError("\(source) must hold an array of tabs (or {\"tabs\": [...]})")
        }
        guard !list.isEmpty else { throw WireError("\(source) lists no tab") }
        var tabs: [TabInfo] = []
        for (i, item) in list.enumerated() {
            do {
                let raw = TabInfo(id: try item.string("id"), title: try item.string("title"), icon: try item.string("icon"),
                                  color: try item.string("color"), badge: item["badge"] == nil ? nil : try item.optionalString("badge"))
                tabs.append(try Limits.validate(raw))
            } catch let error as WireError {
                throw WireError("\(source), tab \(i + 1): \(error.message)")
            } catch {
                throw WireError("\(source), tab \(i + 1): \(error)")
            }
        }
        return tabs
    }
}
