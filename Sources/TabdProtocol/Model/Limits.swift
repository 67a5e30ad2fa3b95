/// The limits of PROTOCOL.md, checked by ``Limits/validate…`` functions that throw `invalid`.
/// Lengths count Unicode scalars.
public enum Limits {
    public static let maxTabs = 32
    /// The room of a client that names none.
    public static let defaultRoom: RoomID = "main"
    public static let maxRoomIDLength = 64

    /// Whether `id` is a room id: 1 to 64 of `A-Z a-z 0-9 _ -`.
    public static func isRoomID(_ id: String) -> Bool {
        let bytes = id.utf8
        return (1...maxRoomIDLength).contains(bytes.count) && bytes.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x5F || b == 0x2D
        }
    }

    public static let maxTabIDLength = 32
    public static let maxTitleLength = 64
    public static let maxIconLength = 64
    public static let maxBadgeLength = 8
    public static let maxRouteLength = 128
    public static let maxStackDepth = 64
    public static let maxKeyLength = 64
    public static let maxValueBytes = 4096
    public static let maxKeysPerTab = 256
    public static let maxRefLength = 64
    public static let maxClientNameLength = 64
    /// How many clients a snapshot lists (`clientCount` counts them all).
    public static let maxClientsInSnapshot = 100
    /// A `clients` answer's page: 100 clients unless `limit` asks for 1 to 1,000.
    public static let defaultClientsPage = 100
    public static let maxClientsPage = 1_000
    /// The largest seq, counter or count a snapshot may hold (2^53 - 1, exact in every
    /// JSON reader): far beyond any real history, and far enough from `Int.max` that
    /// adding to it never overflows.
    public static let maxCount = 9_007_199_254_740_991

    package static func validateTabID(_ id: String) throws(CommandError) {
        let n = id.unicodeScalars.count
        guard n >= 1, n <= maxTabIDLength,
              id.unicodeScalars.allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "_" || $0 == "-" })
        else { throw .invalid("tab id must match [a-z0-9_-]{1,32}, got '\(id.prefix(40))'") }
    }

    package static func validateTitle(_ title: String) throws(CommandError) {
        let n = title.unicodeScalars.count
        guard n >= 1, n <= maxTitleLength else { throw .invalid("title must be 1–64 characters, got \(n)") }
    }

    package static func validateIcon(_ icon: String) throws(CommandError) {
        let n = icon.unicodeScalars.count
        guard n >= 1, n <= maxIconLength,
              icon.unicodeScalars.allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "." })
        else { throw .invalid("icon must match [a-z0-9.]{1,64}, got '\(icon.prefix(70))'") }
    }

    /// Returns the color in upper case.
    package static func normalizeColor(_ color: String) throws(CommandError) -> String {
        let scalars = Array(color.unicodeScalars)
        guard scalars.count == 7, scalars[0] == "#",
              scalars.dropFirst().allSatisfy({ $0.properties.isASCIIHexDigit })
        else { throw .invalid("color must be #RRGGBB, got '\(color.prefix(20))'") }
        return color.uppercased()
    }

    package static func validateBadge(_ badge: String?) throws(CommandError) {
        guard let badge else { return }
        let n = badge.unicodeScalars.count
        guard n >= 1, n <= maxBadgeLength else { throw .invalid("badge must be null or 1–8 characters, got \(n)") }
    }

    package static func validateRoute(_ route: String) throws(CommandError) {
        let n = route.unicodeScalars.count
        guard n >= 1, n <= maxRouteLength else { throw .invalid("route must be 1–128 characters, got \(n)") }
    }

    package static func validateOffset(_ offset: Double) throws(CommandError) {
        guard offset.isFinite, offset >= 0 else { throw .invalid("offset must be a finite number ≥ 0") }
    }

    package static func validateKey(_ key: String) throws(CommandError) {
        let n = key.unicodeScalars.count
        guard n >= 1, n <= maxKeyLength else { throw .invalid("key must be 1–64 characters, got \(n)") }
    }

    package static func validateValue(_ value: JSONValue) throws(CommandError) {
        guard value.compactSize(limit: maxValueBytes) <= maxValueBytes else {
            throw .invalid("value is more than \(maxValueBytes) bytes as compact JSON")
        }
        if let key = value.firstRepeatedKey {
            throw .invalid("value repeats the key '\(key.prefix(64))' in one object: it would not round-trip exactly")
        }
    }

    /// Validates every field of a new tab; returns it with its color normalized.
    package static func validate(_ info: TabInfo) throws(CommandError) -> TabInfo {
        try validateTabID(info.id)
        try validateTitle(info.title)
        try validateIcon(info.icon)
        var info = info
        info.color = try normalizeColor(info.color)
        try validateBadge(info.badge)
        return info
    }
}
