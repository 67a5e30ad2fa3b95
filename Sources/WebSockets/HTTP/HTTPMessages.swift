/// The HTTP methods a request on a dynamic path can have (those libwebsockets recognises).
public enum HTTPMethod: String, Sendable {
    case get = "GET", head = "HEAD", post = "POST", put = "PUT", delete = "DELETE", patch = "PATCH", options = "OPTIONS"
}

/// One HTTP request for a path in `Configuration.dynamicPaths` or under one of
/// `Configuration.dynamicPrefixes`, with its whole body.
public struct HTTPRequest: Sendable {
    /// The method; for `.head` the server sends the headers of the answer without its body.
    public let method: HTTPMethod
    /// The path without the query, e.g. `/api/rooms/7`.
    public let path: String
    /// The query parameters, percent-decoded; a repeated name keeps its last value.
    public let query: [String: String]
    /// The `Authorization` header, if any.
    public let authorization: String?
    /// The whole body (`content-length` bytes); empty without one, or when `bodyTooLarge`.
    public let body: [UInt8]
    /// The body is longer than `Configuration.maxRequestBodyBytes`: it was not read, `body` is
    /// empty, and the request reaches the handler as soon as this is known (answer 413).
    public let bodyTooLarge: Bool
    /// The `Last-Event-ID` header, if any: where a reader of server-sent events resumes.
    public let lastEventID: String?

    public init(
        method: HTTPMethod = .get,
        path: String,
        query: [String: String] = [:],
        authorization: String? = nil,
        body: [UInt8] = [],
        bodyTooLarge: Bool = false,
        lastEventID: String? = nil
    ) {
        self.method = method
        self.path = path
        self.query = query
        self.authorization = authorization
        self.body = body
        self.bodyTooLarge = bodyTooLarge
        self.lastEventID = lastEventID
    }
}

/// The answer to an `HTTPRequest`; sent with a `content-length`, so keep-alive keeps working.
public struct HTTPResponse: Sendable {
    /// The status code, e.g. 200, 204, 401, 503.
    public var status: Int
    /// The `content-type` header.
    public var contentType: String
    /// The body bytes.
    public var body: [UInt8]
    /// Extra headers, e.g. `("cache-control", "no-store")`; names without the colon.
    public var headers: [(String, String)] = []
    /// A body sent as it is made (``HTTPResponder/stream(_:limit:)``): no `content-length`,
    /// and the connection closes at its end.
    var stream: HTTPStream?

    public init(status: Int, contentType: String, body: [UInt8], headers: [(String, String)] = []) {
        self.status = status
        self.contentType = contentType
        self.body = body
        self.headers = headers
    }

    /// A UTF-8 text response (`text/plain; charset=utf-8` unless told otherwise).
    public init(
        status: Int,
        text: String,
        contentType: String = "text/plain; charset=utf-8",
        headers: [(String, String)] = []
    ) {
        self.init(status: status, contentType: contentType, body: Array(text.utf8), headers: headers)
    }
}
