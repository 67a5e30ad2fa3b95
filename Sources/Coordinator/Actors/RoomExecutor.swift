/// An actor with nothing of its own, whose serial executor a room's actors share when
/// nobody gives them one (``Coordinator/Configuration/executor``): the coordinator, its
/// ``TabActor``s and its ``ScrollCounter`` run on one executor, so the coordinator visits
/// them synchronously (`assumeIsolated`) and a command never suspends while it is decided
/// and applied. Rooms do not share executors: each room is as fair to the others as one
/// actor is.
public actor RoomExecutor {
    public init() {}
}
