/// How the connection to the engine is protected and whom it logs in as: TLS (the servers'
/// certificates checked against a CA file, or the system's CAs; a client certificate for
/// mutual TLS) and credentials (a NATS credentials file, or a user and password). The
/// default is neither: plain TCP, no credentials.
///
/// Its description and ``summary(urls:)`` name files and the user, never the password.
public struct EngineSecurity: Sendable, Equatable, CustomStringConvertible {
    /// Whom the connection logs in as.
    public enum Credentials: Sendable, Equatable {
        /// A NATS credentials file (a user JWT and its NKey seed); libnats reads it at
        /// every connect and reconnect.
        case file(String)
        /// A user name and password.
        case user(String, password: String)
    }

    /// TLS to every server even when the URLs say nats:// (a tls:// URL, a CA or a
    /// client certificate asks for it too).
    public var tls: Bool
    /// PEM file of the CAs that sign the servers' certificates (nil: the system's CAs).
    public var caFile: String?
    /// PEM files of this client's certificate chain and its key, for mutual TLS.
    public var certificateFile: String?
    public var keyFile: String?
    public var credentials: Credentials?

    public init(tls: Bool = false, caFile: String? = nil, certificateFile: String? = nil, keyFile: String? = nil,
                credentials: Credentials? = nil) {
        self.tls = tls
        self.caFile = caFile
        self.certificateFile = certificateFile
        self.keyFile = keyFile
        self.credentials = credentials
    }

    /// Whether the connection to `urls` is TLS: asked for, a file of it given, or any URL
    /// is tls://. libnats 3.4 itself takes tls:// for nats:// and would speak plain TCP to
    /// a server that does not require TLS: the client has to insist.
    public func usesTLS(urls: [String]) -> Bool {
        tls || caFile != nil || certificateFile != nil || keyFile != nil || urls.contains { $0.lowercased().hasPrefix("tls://") }
    }

    /// For logs and errors, after the URLs: "over TLS (CA 'ca.pem', client certificate
    /// 'node.pem') as user 'tabd'", "with the credentials file 'tabd.creds'"; empty for a
    /// plain connection without credentials. Never the password.
    public func summary(urls: [String]) -> String {
        var files: [String] = []
        if let caFile { files.append("CA '\(caFile)'") }
        if let certificateFile { files.append("client certificate '\(certificateFile)'") }
        var parts: [String] = []
        if usesTLS(urls: urls) { parts.append("over TLS" + (files.isEmpty ? "" : " (\(files.joined(separator: ", ")))")) }
        switch credentials {
        case nil: break
        case let .file(path): parts.append("with the credentials file '\(path)'")
        case let .user(name, _): parts.append("as user '\(name)'")
        }
        return parts.joined(separator: " ")
    }

    public var description: String {
        let text = summary(urls: [])
        return text.isEmpty ? "plain, no credentials" : text
    }

    /// `text` as it has to go to libnats to arrive as itself: libnats 3.4 puts the user
    /// and password into the CONNECT JSON as they are, so a `"` or `\` (or a control
    /// character) would break the JSON and the server would close the connection.
    static func jsonEscaped(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F:
                out += "\\u" + String(repeating: "0", count: 4 - String(scalar.value, radix: 16).count) + String(scalar.value, radix: 16)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}
