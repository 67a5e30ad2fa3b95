import Auth
import CCrypto
import Coordinator
import Foundation
import TabdServer
import WebSockets

/// The fixed test key of the JWT seeds and targets (never a real secret).
let testKeyBytes = Array("tabd-fuzz-test-key-not-a-secret-0123456789".utf8)
let testToken = Token(key: try! SigningKey(bytes: testKeyBytes, source: "fuzz"))
/// Seconds since 1970 the targets verify at (the seeds expire after it, some start after it).
let fuzzNow: Double = 1_700_000_000

/// HMAC-SHA256 by libcrypto's one-shot call: the harness's own, to check Auth's.
func hmac(_ message: [UInt8]) -> [UInt8] {
    var out = [UInt8](repeating: 0, count: 64)
    var length: UInt32 = 0
    let done = testKeyBytes.withUnsafeBytes { k in
        message.withUnsafeBytes { m in
            HMAC(EVP_sha256(), k.baseAddress, Int32(testKeyBytes.count),
                 m.baseAddress?.assumingMemoryBound(to: UInt8.self) ?? UnsafePointer(bitPattern: 1), message.count, &out, &length)
        }
    }
    precondition(done != nil && length == 32)
    return Array(out.prefix(32))
}

/// RFC 7515 base64url without padding, written out (not Auth's).
func base64url(_ bytes: [UInt8]) -> [UInt8] {
    let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    var out: [UInt8] = []
    var i = 0
    while i < bytes.count {
        let n = min(3, bytes.count - i)
        var v = UInt32(bytes[i]) << 16
        if n > 1 { v |= UInt32(bytes[i + 1]) << 8 }
        if n > 2 { v |= UInt32(bytes[i + 2]) }
        for k in 0...n { out.append(alphabet[Int(v >> UInt32(18 - 6 * k) & 63)]) }
        i += 3
    }
    return out
}

/// `Token.verify` on any text, and on tokens signed here with the test key from fuzzed
/// header and claims. A token that verifies must carry the test key's HMAC of its signed
/// part; a verified grant must agree with the claims; a changed signature never verifies.
enum JWTTarget {
    static func run(_ bytes: [UInt8]) {
        guard let mode = bytes.first else { return }
        let rest = Array(bytes.dropFirst())
        if mode & 1 == 0 {
            verifyAny(String(decoding: rest, as: UTF8.self))
        } else {
            // header JSON, a 0x00 byte, claims JSON: signed here with the test key.
            let parts = pieces(rest, separator: 0, limit: 2)
            let header = parts[0], claims = parts.count > 1 ? parts[1] : []
            let signingInput = base64url(header) + [UInt8(ascii: ".")] + base64url(claims)
            let token = signingInput + [UInt8(ascii: ".")] + base64url(hmac(signingInput))
            let text = String(decoding: token, as: UTF8.self)
            let result = verifyAny(text)
            checkClaims(result, header: header, claims: claims, length: token.count)
            // The same token with its signature changed in one place never verifies.
            var forged = token
            let at = forged.count - 1 - Int(mode >> 1) % 43
            forged[at] = forged[at] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
            if case .success = verifyAny(String(decoding: forged, as: UTF8.self)) { require(false, "a token with a changed signature verified") }
        }
    }

    @discardableResult
    static func verifyAny(_ text: String) -> Result<Grant, AuthError> {
        let result = Result { () throws(AuthError) in try testToken.verify(text, now: fuzzNow) }
        if case let .success(grant) = result {
            let utf8 = Array(text.utf8)
            guard let dot = utf8.lastIndex(of: UInt8(ascii: ".")) else { require(false, "verified without a '.'"); return result }
            require(base64url(hmac(Array(utf8[..<dot]))) == Array(utf8[(dot + 1)...]), "verified a token the test key did not sign")
            require(grant.expires.map { $0 > fuzzNow } == true, "verified an expired token")
            if case let .room(id)? = grant.scope { require(Limits.isRoomID(id), "scope of a bad room id") }
        }
        if case let .failure(error) = result { _ = error.description }
        return result
    }

    static func checkClaims(_ result: Result<Grant, AuthError>, header: [UInt8], claims: [UInt8], length: Int) {
        let h = try? JSONParser.parse(header)
        let c = try? JSONParser.parse(claims)
        let headerOK = h?.objectValue != nil && h?["alg"] == .string("HS256") && h?["crit"] == nil
        switch result {
        case let .success(grant):
            require(headerOK && length <= Token.maxLength, "verified with header \(String(decoding: header, as: UTF8.self))")
            guard let c, c.objectValue != nil else { require(false, "verified without a claims object"); return }
            require(c["role"]?.stringValue == grant.role.rawValue, "role differs from the claim")
            require(c["exp"]?.doubleValue == grant.expires, "expiry differs from the claim")
            if let nbf = c["nbf"]?.doubleValue { require(nbf <= fuzzNow, "verified before nbf") }
            require(c["room"]?.stringValue == grant.scope?.description, "room differs from the claim")
            let name = c["name"].flatMap { $0.isNull ? nil : $0.stringValue }
            require(name == grant.name, "name differs from the claim")
        case let .failure(error):
            if error == .badSignature { require(false, "our own signature refused (header \(String(decoding: header, as: UTF8.self)))") }
            if headerOK, length <= Token.maxLength, case .algorithm = error { require(false, "HS256 refused as an algorithm") }
        }
    }
}

/// A request's parameters as tabd reads them, all through the daemon's own functions: the
/// query split (`RequestTarget.query`, the HTTP front's), the credential
/// (`Authenticator.credential`, `authenticate`), the upgrade's decision (`Admission`) and
/// the API's routing of a listing (`APIRoute.resolve`).
/// Input: an `Authorization` header, a 0x00 byte, the query.
enum QueryTarget {
    static let operatorToken = "fuzz-operator-token"
    static let auth = Authenticator(operatorToken: operatorToken, signingKey: try! SigningKey(bytes: testKeyBytes, source: "fuzz"))

    static func run(_ bytes: [UInt8]) {
        let parts = pieces(bytes, separator: 0, limit: 2)
        let header: String? = parts.count > 1 ? String(decoding: parts[0], as: UTF8.self) : nil
        let query: [String: String]
        do { query = try RequestTarget.query(parts.count > 1 ? parts[1] : parts[0]) } catch {
            require(error.status == 400, "a query refused with \(error.status)")
            return
        }
        let credential = Authenticator.credential(authorization: header, query: query)
        if let header, let c = credential, c != query["token"] {
            require(!c.hasPrefix(" ") && !c.hasSuffix(" "), "credential keeps spaces: '\(c)'")
            require(header.lowercased().contains(c.lowercased()) || c.isEmpty, "credential not from the header")
        }
        let grant = auth.authenticate(credential, now: fuzzNow)
        switch grant {
        case let .success(g):
            if credential == operatorToken { require(g == .operatorToken, "operator token gives \(g)") }
            else { _ = JWTTarget.verifyAny(credential ?? "") }
        case let .failure(error):
            require(credential != operatorToken, "operator token refused: \(error)")
            if credential?.isEmpty ?? true { require(error == .missing, "no credential gives \(error)") }
        }
        let granted = grant.map { Optional($0) }
        checkUpgrade(query, granted)
        checkListing(query, granted)
        if let after = query["after"] { RoomIDTarget.check(after) }
    }

    /// An accepted upgrade is for a room id, with credentials that give a role in it.
    static func checkUpgrade(_ query: [String: String], _ grant: Result<Grant?, AuthError>) {
        let room = Admission.room(query: query)
        RoomIDTarget.check(room)
        let refusal = Admission.decide(grant: grant, origin: query["origin"], host: query["host"], room: room,
                                       context: .init(), roomRefusal: { nil })
        let role = Admission.role(grant, in: room)
        if let refusal {
            require([400, 401, 403].contains(refusal.status), "an upgrade refused with \(refusal.status)")
            require(refusal.why?.contains("\n") != true, "a log line with a line break")
        } else {
            require(Limits.isRoomID(room), "a connection to '\(room)' accepted")
            require(role != nil, "a connection accepted without a role in '\(room)'")
        }
    }

    /// A listing's route holds a valid limit and `after`, and a 400 names one that is not.
    static func checkListing(_ query: [String: String], _ grant: Result<Grant?, AuthError>) {
        let limitOK = query["limit"].map { Int($0).map { (1...APIRoute.maxLimit).contains($0) } ?? false } ?? true
        let afterOK = query["after"].map(Limits.isRoomID) ?? true
        switch APIRoute.resolve(method: .get, path: "/api/rooms", query: query, grant: grant, bodyTooLarge: false) {
        case let .success(.listRooms(after, limit)):
            require(grant.map { $0?.isAdminOfEveryRoom ?? true } == .success(true), "a listing allowed to \(grant)")
            require(limitOK && afterOK, "a listing with limit '\(query["limit"] ?? "")', after '\(query["after"] ?? "")' accepted")
            require(limit == (query["limit"].flatMap { Int($0) } ?? APIRoute.defaultLimit) && after == query["after"], "the listing's query changed")
        case let .success(route):
            require(false, "a listing routed to \(route)")
        case let .failure(error):
            switch error.status {
            case 400: require(!(limitOK && afterOK), "a valid listing query refused: \(error.message)")
            case 401: require((try? grant.get()) == nil, "a listing refused with 401 for a grant")
            case 403: break
            default: require(false, "a listing refused with \(error.status)")
            }
        }
    }
}

/// Room ids (`Limits.isRoomID`, `RoomScope(claim:)`): the check agrees with the grammar
/// `[A-Za-z0-9_-]{1,64}` over bytes, a room scope exists exactly for room ids and `*`,
/// and a token naming the room verifies with that scope exactly when it is one.
enum RoomIDTarget {
    static func run(_ bytes: [UInt8]) {
        check(String(decoding: bytes, as: UTF8.self))
    }

    static func check(_ id: String) {
        let utf8 = Array(id.utf8)
        let grammar = (1...64).contains(utf8.count) && utf8.allSatisfy { b in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(b) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(b)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b) || b == UInt8(ascii: "_") || b == UInt8(ascii: "-")
        }
        let isRoom = Limits.isRoomID(id)
        require(isRoom == grammar, "isRoomID('\(id)') is \(isRoom)")
        let scope = RoomScope(claim: id)
        if id == "*" { require(scope == .every, "'*' is not every room") }
        else { require(scope == (isRoom ? .room(id) : nil), "RoomScope(claim: '\(id)') is \(String(describing: scope))") }
        if isRoom {
            require(scope?.covers(id) == true && scope?.covers(id + "x") == false, "scope coverage")
            // The id through a JSON string and a token's claim.
            require((try? JSONParser.parse(JSONValue.string(id).compactBytes)) == .string(id), "room id through JSON")
        }
        guard utf8.count <= 80 else { return }
        let claims = JSONValue.object([("room", .string(id)), ("role", .string("view")), ("exp", .int(Int(fuzzNow) + 60))])
        let header = Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8)
        let signingInput = base64url(header) + [UInt8(ascii: ".")] + base64url(claims.compactBytes)
        let signed = String(decoding: signingInput + [UInt8(ascii: ".")] + base64url(hmac(signingInput)), as: UTF8.self)
        switch Result(catching: { () throws(AuthError) in try testToken.verify(signed, now: fuzzNow) }) {
        case let .success(grant): require((isRoom || id == "*") && grant.scope == scope, "a token for room '\(id)' verified as \(String(describing: grant.scope))")
        case let .failure(error): require(!isRoom && id != "*", "a token for room '\(id)' refused: \(error)")
        }
    }
}

/// The cluster's seals (`ClusterSecret`) on any bytes: a purpose byte, then a seal, fields
/// and a body separated by 0x00 (fields by 0x01). Whatever the bytes, `opens` never crashes
/// and opens exactly the seals this secret's keys make of the same purpose, fields and body
/// (computed here with each key alone); a seal with one byte changed never opens.
enum SealTarget {
    static let first = try! ClusterSecret(keys: [Array("tabd-fuzz-cluster-key-one-not-a-secret".utf8)], source: "fuzz")
    static let second = try! ClusterSecret(keys: [Array("tabd-fuzz-cluster-key-two-not-a-secret".utf8)], source: "fuzz")
    static let both = try! ClusterSecret(keys: [Array("tabd-fuzz-cluster-key-one-not-a-secret".utf8),
                                                Array("tabd-fuzz-cluster-key-two-not-a-secret".utf8)], source: "fuzz")

    static func run(_ bytes: [UInt8]) {
        guard let head = bytes.first else { return }
        let purposes = ClusterSecret.Purpose.allCases
        let purpose = purposes[Int(head) % purposes.count]
        let parts = pieces(Array(bytes.dropFirst()), separator: 0, limit: 3)
        let seal = String(decoding: parts[0], as: UTF8.self)
        let fields = parts.count > 1 ? pieces(parts[1], separator: 1, limit: 64).map { String(decoding: $0, as: UTF8.self) } : []
        let body = parts.count > 2 ? parts[2] : []
        let made = [first.seal(purpose, fields: fields, body: body), second.seal(purpose, fields: fields, body: body)]
        let opened = both.opens(seal, purpose, fields: fields, body: body)
        if opened != made.contains(seal) {
            fatalError("seal \(seal) opened: \(opened), yet the seals of the keys are \(made)")
        }
        // The real seal opens; with one byte changed (chosen by the input) it does not.
        let real = Array(made[Int(head >> 4) & 1].utf8)
        precondition(both.opens(String(decoding: real, as: UTF8.self), purpose, fields: fields, body: body))
        var changed = real
        let at = Int(bytes.count) % changed.count
        changed[at] ^= max(1, head & 0x7F)
        let text = String(decoding: changed, as: UTF8.self)
        if both.opens(text, purpose, fields: fields, body: body), text != String(decoding: real, as: UTF8.self) {
            fatalError("a changed seal opened: \(text)")
        }
    }
}
