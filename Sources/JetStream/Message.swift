/// A message delivered from a stream: its payload, the headers tabd reads, and where it
/// is in the stream.
public struct StreamMessage: Sendable {
    public let subject: String
    public let data: [UInt8]
    public let headers: [String: String]
    /// The message's sequence in its stream (0 for a core NATS message).
    public let streamSeq: UInt64
    /// Messages after this one in the stream when it was delivered (consumers only).
    public let pending: UInt64
}

/// What a compare-and-set publish came to.
public enum PublishResult: Sendable, Equatable {
    /// Stored at `seq`; `duplicate` when an earlier publish with the same message id was.
    case stored(seq: UInt64, duplicate: Bool)
    /// The stream's last sequence was not the expected one: nothing was stored.
    case wrongLastSequence
    /// No answer in time: it may or may not be stored (publish again with the same id).
    case unknown(String)
    /// Refused for another reason: nothing was stored.
    case failed(String)
}

/// A stream's shape and position.
public struct StreamInfo: Sendable, Equatable {
    public let name: String
    public let replicas: Int
    public let firstSeq: UInt64
    public let lastSeq: UInt64
    public let messages: UInt64
    /// When the stream was created (ns since 1970), the same on every replica: tells one
    /// incarnation of a stream from another of the same name.
    public let created: Int64
}
