/// Who is connected, in join order, as presence events leave it.
///
/// `clients` may list fewer than `count` (a snapshot on the wire lists the first 100);
/// a departure of an unlisted client then only lowers the count.
public struct Roster: Sendable, Equatable {
    public var clients: [ClientInfo]
    public var count: Int

    public init(clients: [ClientInfo] = [], count: Int? = nil) {
        self.clients = clients
        self.count = count ?? clients.count
    }

    /// What `clientJoined` and `clientLeft` do: the only code that changes presence.
    public mutating func apply(_ event: Event) throws(FoldError) {
        switch event {
        case let .clientJoined(client):
            clients.append(client)
            count += 1
        case let .clientLeft(id):
            if let i = clients.firstIndex(where: { $0.id == id }) {
                clients.remove(at: i)
                count -= 1
            } else if count > clients.count {
                count -= 1 // listed beyond the cap of a capped snapshot
            } else {
                throw FoldError("clientLeft of unknown client \(id)")
            }
        default:
            break
        }
    }
}
