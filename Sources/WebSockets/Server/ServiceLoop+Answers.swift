import CWebSockets

/// HTTP answers on their way out. An answer is written as the socket takes it, at most
/// `answerPiece` bytes per write, from its own storage: lws holds at most the tail of one
/// piece, never a whole answer. While a connection's answer is not all written, its next
/// request is not read (ServiceLoop+HTTP.swift), so a connection holds one answer at most.
///
/// An answer the socket does not take at once is reported to the table
/// (`ConnectionTable.holdAnswer`): it counts in the bytes the server holds, bounded by
/// `Configuration.totalQueueBytes`, until it is written or its connection is gone; past the
/// bound, the table may pick the socket to be dropped (`WakeWork.dropAnswers`).
extension ServiceLoop {
    /// Bytes of an answer handed to lws per write.
    static let answerPiece = 64 * 1024

    /// Starts writing `response` on an HTTP connection (or one about to be flushed and shut).
    func sendAnswer(_ response: HTTPResponse, headOnly: Bool, persistence: ResponseBytes.Persistence, to connection: Connection,
                    extraHeaders: [(String, String)] = []) {
        let (head, body) = ResponseBytes.parts(response, headOnly: headOnly, persistence: persistence, extraHeaders: extraHeaders)
        connection.answer = AnswerOutput(head: head, body: body, joinBelow: Self.writeBudget)
        writeAnswer(connection)
    }

    /// Writes what the socket takes of the connection's answer now. True when the answer is
    /// out and lws holds nothing of it; false while some remains (a writable callback is
    /// asked for, and the answer is counted as held), or the connection failed and is dropped.
    @discardableResult
    func writeAnswer(_ connection: Connection) -> Bool {
        guard !connection.killed else { return false }
        let size = connection.answer?.count ?? Self.answerPiece
        var writes = 0
        while var answer = connection.answer, lws_partial_buffered(connection.wsi) == 0 {
            let wsi = connection.wsi
            let written = answer.writeNext(max: Self.answerPiece) { Int(tabd_lws_write_raw(wsi, $0.baseAddress, $0.count)) }
            guard written >= 0 else {
                kill(connection)
                return false
            }
            connection.answer = answer.isDone ? nil : answer
            writes += 1
            if answer.isDone || written == 0 || writes >= Self.maxWritesPerCallback || lws_send_pipe_choked(wsi) != 0 { break }
        }
        if connection.answer == nil && lws_partial_buffered(connection.wsi) == 0 {
            if connection.answerHeld > 0 {
                connection.answerHeld = 0
                update { $0.releaseAnswer(socket: connection.socket); return false }
            }
            return true
        }
        lws_callback_on_writable(connection.wsi)
        if connection.answerHeld == 0 {
            connection.answerHeld = size
            var dropped: [UInt64] = []
            update { table in
                let wake = table.holdAnswer(socket: connection.socket, bytes: size)
                dropped = table.takeDroppedAnswers()
                return wake
            }
            // Now, not a pass later: a pass may read many requests, each answer as large.
            if !dropped.isEmpty { dropAnswers(dropped) }
        }
        return false
    }

    /// The table dropped these sockets' answers for the total: the connections go too.
    func dropAnswers(_ sockets: [UInt64]) {
        for socket in sockets {
            guard let connection = connections[socket], connection.answerHeld > 0 else { continue }
            connection.answerHeld = 0
            connection.answer = nil
            droppedAnswers.add(1, ordering: .relaxed)
            kill(connection)
        }
    }
}
