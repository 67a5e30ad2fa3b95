import CNATS

/// A failure of the engine (NATS / JetStream), with libnats' status and JetStream's own
/// error code when it gave one.
public struct EngineError: Error, Sendable, CustomStringConvertible {
    /// libnats' `natsStatus` (0 = ok).
    public let status: Int
    /// JetStream's error code (e.g. 10071 wrong last sequence), 0 when none.
    public let code: Int
    public let message: String

    public var description: String { code == 0 ? message : "\(message) (JetStream error \(code))" }

    /// JetStream error codes tabd acts on.
    public static let wrongLastSequence = 10071
    /// The same refusal without the stream's sequence in its text: what a server answers a
    /// stale `Nats-Expected-Last-Subject-Sequence` with (a room in a shard).
    public static let wrongLastSequenceConstant = 10164

    /// Whether JetStream's `code` says the message's expected place was taken.
    public static func isPlaceTaken(_ code: Int) -> Bool {
        code == wrongLastSequence || code == wrongLastSequenceConstant || code == wrongLastMessageID
    }
    /// The stream does not end with the expected message id (a broken chain).
    public static let wrongLastMessageID = 10070
    public static let streamNotFound = 10059
    public static let noMessageFound = 10037

    /// Whether the engine did not answer in time: the outcome is unknown.
    public var isTimeout: Bool { status == Int(NATS_TIMEOUT.rawValue) }

    init(_ status: natsStatus, _ code: jsErrCode = jsErrCode(rawValue: 0), _ what: String) {
        self.status = Int(status.rawValue)
        self.code = Int(code.rawValue)
        var text = String(cString: natsStatus_GetText(status))
        var detail: natsStatus = NATS_OK
        // The thread's last error text, if it is this failure's (it may be an older one's).
        if let last = nats_GetLastError(&detail), last.pointee != 0, detail == status { text = Self.withoutSource(String(cString: last)) }
        message = "\(what): \(text)"
    }

    private init(status: Int, code: Int, message: String) {
        self.status = status
        self.code = code
        self.message = message
    }

    /// A mistake found before libnats was asked: `message` as it is.
    init(invalid message: String) { self.init(status: Int(NATS_INVALID_ARG.rawValue), code: 0, message: message) }

    /// The same failure with `note` after its text.
    func adding(_ note: String) -> EngineError { EngineError(status: status, code: code, message: "\(message) \(note)") }

    /// libnats' error text without the place in its sources it starts with:
    /// "(conn.c:1905): Authorization Violation" is "Authorization Violation".
    static func withoutSource(_ text: String) -> String {
        guard text.hasPrefix("("), let end = text.firstRange(of: "): "),
              text[text.index(after: text.startIndex)..<end.lowerBound].contains(".c:") else { return text }
        return String(text[end.upperBound...])
    }
}
