import Coordinator

/// What a room's log adds to the room when other writers share it.
///
/// A room's log is its ``Durability`` (the coordinator appends to it and reads from it).
/// A single tabd's log (memory or the state file) is written by this room alone, and a
/// room loaded from it has no `SharedLog`. A cluster's log (the engine) is shared by the
/// nodes that serve the room: the room then also hears what the others wrote, learns
/// when the room ended in the log, lets the clients of writers that died go, and may have
/// its clients' commands decided by one writer (a ``CommandRouter``). The room only ever
/// talks to these two protocols; what lies behind them (which engine, how commands travel
/// between writers) is the implementation's own (`Sources/TabdServer/Cluster`).
protocol SharedLog: Sendable {
    /// Calls `handler` whenever other writers' batches arrived (the coordinator takes them
    /// in: ``Coordinator/absorb()``).
    func onForeignBatches(_ handler: @escaping @Sendable () -> Void)
    /// Calls `handler` when the log says the room may have ended here (its last message a
    /// deletion or a move): the room then asks ``standing()``.
    func onEnded(_ handler: @escaping @Sendable () -> Void)
    /// Where the room stands in the log now (a read of it, off the cooperative pool); nil
    /// when the log cannot say now.
    func standing() async -> RoomStanding?
    /// The clients listed in the room whose writers stopped answering (they leave), and the
    /// writers whose counted shares go to 0. `includingOwn`: this writer's clients of an
    /// earlier life too (at load).
    func departed(includingOwn: Bool) -> (clients: Set<ClientID>, writers: Set<String>)
    /// The room's command router, when writers hand each other commands (nil: each writer
    /// decides its own clients' commands, and nothing else). `clock` is the room's.
    func makeRouter(room: RoomID, clock: any RoomClock) -> (any CommandRouter)?
    /// The room was deleted: what it still writes can never be stored, and fails now.
    func abandon()
}

/// Where a loaded room stands in its log (``SharedLog/standing()``).
enum RoomStanding: Sendable, Equatable {
    /// As loaded.
    case current
    /// Deleted (perhaps created again since): its clients are closed with 4404.
    case gone
    /// Moved within the log, the same life: its clients reconnect and resume there.
    case moved
}

/// Where a room's commands are decided when one writer of a shared log decides them: here,
/// or handed to that writer, whose answers come back. Owned by the room's actor and only
/// called on it (each method runs on the caller's isolation).
///
/// The rules it keeps: each client's commands keep their order whoever decides them; a
/// command handed over is decided once, by the writer it went to or (when that one
/// refused it or died) here, never by both; while commands wait for such a decision,
/// what comes after them waits too.
protocol CommandRouter: AnyObject {
    /// A command or a refusal of a client here, in its turn: decided here (`decideHere`),
    /// held, or handed to the room's writer.
    func route(_ input: Room.Input, coordinator: Coordinator, decideHere: (Room.Input) async -> Void,
               isolation: isolated (any Actor)?) async
    /// A message of the other writers for this room (``Room/Input/peer(_:)``): a command
    /// handed here, or an answer to one handed over.
    func receive(_ message: any PeerMessage, coordinator: Coordinator, decideHere: (Room.Input) async -> Void,
                 isolation: isolated (any Actor)?) async
    /// Whether commands handed over wait for answers: the room then calls ``check`` every
    /// ``RoomTimers`` tick of a quarter second.
    var wantsCheck: Bool { get }
    /// Looks for answers that are late (a writer that died): what was handed to it is sent
    /// again or decided here.
    func check(coordinator: Coordinator, decideHere: (Room.Input) async -> Void, isolation: isolated (any Actor)?) async
    /// The end of a turn of the room's loop: what was handed over in it goes out together.
    func endOfTurn()
    /// The room's answers to commands other writers handed to it (``AnswerAddress/peer(_:)``),
    /// from the publisher's thread.
    var answers: any PeerAnswers { get }
}

/// A message of another writer of the room's log for the room (``Room/Input/peer(_:)``).
protocol PeerMessage: Sendable {
    /// The room is not open here (it ended before taking the message): the sender learns
    /// it if it waits for an answer.
    func refuse(room: RoomID)
}

/// Answers to commands other writers handed to a room: the publisher gives each one as it
/// publishes it, then flushes.
protocol PeerAnswers: Sendable {
    /// The answer to the `n`-th command handed to the room.
    func answer(_ n: UInt64, _ frame: ServerFrame)
    /// Sends the answers given since the last flush.
    func flush()
}
