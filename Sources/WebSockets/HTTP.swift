/// A plain HTTP GET for one of `Configuration.dynamicPaths`.
public struct HTTPRequest: Sendable {
    /// The path without the query, e.g. `/metrics`.
    public let path: String
    /// The query parameters, percent-decoded; a repeated name keeps its last value.
    public let query: [String: String]
    /// The `Authorization` header, if any.
    public let authorization: String?

    public init(path: String, query: [String: String] = [:], authorization: String? = nil) {
        self.path = path
        self.query = query
        self.authorization = authorization
    }
}

/// The answer to an `HTTPRequest`; sent with a `content-length`, so keep-alive keeps working.
public struct HTTPResponse: Sendable {
    /// The status code, e.g. 200, 401, 503.
    public var status: Int
    /// The `content-type` header.
    public var contentType: String
    /// The body bytes.
    public var body: [UInt8]
    /// Extra headers, e.g. `("cache-control", "no-store")`; names without the colon.
    public var headers: [(String, String)] = []

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
