import Auth
import FoundationEssentials
import Glibc
import Dispatch
import WebSockets

extension Authenticator {
    /// The grant of what a request carries (`Authorization: Bearer`, else `?token=`), now.
    /// Nil when no credentials are configured: then everyone may do everything, and a
    /// WebSocket client has the role `control`.
    func grant(query: [String: String], authorization: String?) -> Result<Grant?, AuthError> {
        guard isOn else { return .success(nil) }
        return authenticate(Self.credential(authorization: authorization, query: query), now: Date().timeIntervalSince1970).map { $0 }
    }

    /// The `WWW-Authenticate` challenge of RFC 6750 for a 401. Fixed text only: the
    /// error's description may quote the token's own header.
    static func challenge(_ error: AuthError) -> String {
        error == .missing ? "Bearer" : "Bearer error=\"invalid_token\""
    }
}
