import Coordinator

/// A small deterministic generator (SplitMix64), so a failing run can be repeated from its seed.
public struct SeededRandom: RandomNumberGenerator {
    private var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Random commands of every kind, over a pool of tab ids of which some exist only some of the time.
public func randomCommand(_ rng: inout SeededRandom) -> Command {
    let pool = ["home", "favorites", "profile", "t0", "t1", "t2", "t3"]
    let tab = pool.randomElement(using: &rng)!
    let maybeTab: TabID? = Bool.random(using: &rng) ? tab : nil
    switch Int.random(in: 0..<100, using: &rng) {
    case 0..<14: return .select(tab: tab)
    case 14..<28: return .tap(tab: tab)
    case 28..<44: return .push(tab: maybeTab, route: "r\(Int.random(in: 0..<9, using: &rng))")
    case 44..<54: return .pop(tab: maybeTab)
    case 54..<58: return .popToRoot(tab: maybeTab)
    case 58..<64: return .scroll(tab: maybeTab, offset: Double(Int.random(in: 0..<2000, using: &rng)) / 4)
    case 64..<72: return .set(tab: maybeTab, key: "k\(Int.random(in: 0..<4, using: &rng))",
                              value: Bool.random(using: &rng) ? .int(Int.random(in: 0..<100, using: &rng)) : .null)
    case 72..<80: return .addTab(TabInfo(id: tab, title: "T \(tab)", icon: "star", color: "#336699"),
                                 index: Bool.random(using: &rng) ? nil : Int.random(in: 0..<5, using: &rng))
    case 80..<84: return .updateTab(TabUpdate(id: tab, title: "U\(Int.random(in: 0..<3, using: &rng))",
                                              badge: Bool.random(using: &rng) ? .some(nil) : .some("\(Int.random(in: 1..<9, using: &rng))")))
    case 84..<90: return .moveTab(tab: tab, index: Int.random(in: 0..<4, using: &rng))
    case 90..<97: return .removeTab(tab: tab)
    case 97: return .sync
    case 98: return .clients(after: nil, limit: nil)
    default: return .ping
    }
}

