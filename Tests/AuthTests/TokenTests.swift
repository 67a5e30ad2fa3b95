@testable import Auth
import Coordinator
import Foundation
import Testing

private let key = try! SigningKey(bytes: Array("0123456789abcdef0123456789abcdef".utf8), source: "test")
private let now = 1_800_000_000.0

/// A token with these raw parts, signed (or not) under `key`.
private func raw(header: String, payload: String, signature: String? = nil) -> String {
    let input = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(payload.utf8))
    return input + "." + (signature ?? Base64URL.encode(Crypto.hmacSHA256(key: key.bytes, message: Array(input.utf8))))
}

private func refusal(_ token: String, at time: Double = now) -> AuthError? {
    do { _ = try Token(key: key).verify(token, now: time); return nil } catch { return error }
}

struct CryptoTests {
    @Test func hmacSHA256MatchesRFC4231TestCase2() {
        let mac = Crypto.hmacSHA256(key: Array("Jefe".utf8), message: Array("what do ya want for nothing?".utf8))
        #expect(mac.map { String(format: "%02x", $0) }.joined() == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }

    @Test func constantTimeEqualComparesWholeBytes() {
        #expect(Crypto.constantTimeEqual([1, 2, 3], [1, 2, 3]))
        #expect(!Crypto.constantTimeEqual([1, 2, 3], [1, 2, 4]))
        #expect(!Crypto.constantTimeEqual([1, 2, 3], [1, 2]))
        #expect(Crypto.constantTimeEqual([], []))
    }

    @Test(arguments: [[], [0], [0xff, 0xfe], Array("any carnal pleasure".utf8), Array(0...255)])
    func base64URLRoundTrips(_ bytes: [UInt8]) {
        let text = Base64URL.encode(bytes)
        #expect(!text.contains("=") && !text.contains("+") && !text.contains("/"))
        #expect(Base64URL.decode(Array(text.utf8)) == bytes)
    }

    @Test(arguments: ["YQ==", "a+b/", "ab c", "abcde", "ab\n", "ä"])
    func base64URLRefusesWhatIsNotStrictBase64URL(_ text: String) {
        #expect(Base64URL.decode(Array(text.utf8)) == nil)
    }
}

struct TokenTests {
    @Test func aSignedTokenVerifiesToItsGrant() throws {
        let grant = Grant(role: .view, scope: .room("lobby"), name: "Ann \"the\" viewer", expires: now + 60)
        let token = Token(key: key).sign(grant, issuedAt: Int(now))
        #expect(try Token(key: key).verify(token, now: now) == grant)
        let every = Grant(role: .admin, scope: .every, expires: now + 1)
        #expect(try Token(key: key).verify(Token(key: key).sign(every, issuedAt: 0), now: now) == every)
    }

    @Test func theSignatureOfAJWTMadeElsewhereIsReproduced() {
        // A widely published HS256 example (header {"alg":"HS256","typ":"JWT"}, key "1234").
        let input = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJqd3QiOiJwd24ifQ"
        let mac = Crypto.hmacSHA256(key: Array("1234".utf8), message: Array(input.utf8))
        #expect(Base64URL.encode(mac) == "4pOAm1W4SHUoOgSrc8D-J1YqLEv9ypAApz27nfYP5L4")
    }

    @Test func onlyHS256IsAccepted() {
        let payload = #"{"room":"main","role":"admin","exp":1900000000}"#
        #expect(refusal(raw(header: #"{"alg":"none"}"#, payload: payload, signature: "")) == .algorithm("none"))
        #expect(refusal(raw(header: #"{"alg":"HS512","typ":"JWT"}"#, payload: payload)) == .algorithm("HS512"))
        #expect(refusal(raw(header: #"{"alg":"hs256"}"#, payload: payload)) == .algorithm("hs256"))
        #expect(refusal(raw(header: #"{"typ":"JWT"}"#, payload: payload)) == .malformed("the header has no alg"))
        #expect(refusal(raw(header: #"{"alg":"HS256","crit":["b64"]}"#, payload: payload))
            == .malformed("critical header extensions are not supported"))
        #expect(refusal(raw(header: #"{"alg":"HS256"}"#, payload: payload)) == nil)
    }

    @Test func aTokenSignedWithAnotherKeyOrChangedIsRefused() throws {
        let other = try SigningKey(bytes: Array(repeating: 7, count: 32), source: "other")
        let grant = Grant(role: .control, scope: .room("main"), expires: now + 60)
        #expect(refusal(Token(key: other).sign(grant, issuedAt: 0)) == .badSignature)
        let token = Token(key: key).sign(grant, issuedAt: 0)
        let parts = token.split(separator: ".").map(String.init)
        let admin = Base64URL.encode(Array(#"{"room":"main","role":"admin","exp":1900000000}"#.utf8))
        #expect(refusal([parts[0], admin, parts[2]].joined(separator: ".")) == .badSignature)
        #expect(refusal(parts[0] + "." + parts[1] + ".") == .badSignature)
        #expect(refusal(token + "A") == .badSignature)
    }

    @Test(arguments: [
        ("", "a JWT has three parts separated by '.'"),
        ("abc.def", "a JWT has three parts separated by '.'"),
        ("a.b.c.d", "a JWT has three parts separated by '.'"),
        ("!!!.e30.sig", "the header is not base64url"),
        ("eyJhbGciOiJIUzI1NiJ9=.e30.sig", "the header is not base64url"),
        ("bm90IGpzb24.e30.sig", "the header is not a JSON object"),
        ("WzFd.e30.sig", "the header is not a JSON object"),
    ])
    func malformedTokensAreRefused(_ token: String, _ why: String) {
        #expect(refusal(token) == .malformed(why))
    }

    @Test(arguments: [
        (#"not json"#, "the payload is not a JSON object"),
        (#"[1]"#, "the payload is not a JSON object"),
        (#"{"room":"main","role":"view"}"#, "no exp claim"),
        (#"{"room":"main","role":"view","exp":"1900000000"}"#, "exp is not a number"),
        (#"{"room":"main","exp":1900000000}"#, "no role claim"),
        (#"{"room":"main","role":"owner","exp":1900000000}"#, "role must be view, control or admin"),
        (#"{"room":"main","role":null,"exp":1900000000}"#, "role must be view, control or admin"),
        (#"{"room":"a b","role":"view","exp":1900000000}"#, "room must be a room id or \"*\""),
        (#"{"room":7,"role":"view","exp":1900000000}"#, "room must be a room id or \"*\""),
        (#"{"room":"main","role":"view","exp":1900000000,"nbf":"x"}"#, "nbf is not a number"),
        (#"{"room":"main","role":"view","exp":1900000000,"name":3}"#, "name is not a string"),
    ])
    func tokensWithBadClaimsAreRefused(_ payload: String, _ why: String) {
        #expect(refusal(raw(header: #"{"alg":"HS256","typ":"JWT"}"#, payload: payload)) == .malformed(why))
    }

    @Test func expiryAndNotBeforeAreExactToTheSecond() {
        let token = raw(header: #"{"alg":"HS256"}"#, payload: #"{"room":"*","role":"view","exp":1800000100,"nbf":1800000000}"#)
        #expect(refusal(token, at: 1_799_999_999.5) == .notYetValid)
        #expect(refusal(token, at: 1_800_000_000) == nil)
        #expect(refusal(token, at: 1_800_000_099.9) == nil)
        #expect(refusal(token, at: 1_800_000_100) == .expired)
    }

    @Test func anOverlongTokenIsRefusedUnread() {
        #expect(refusal(String(repeating: "a", count: Token.maxLength + 1)) == .malformed("longer than 4096 bytes"))
    }

    @Test func aTokenWithoutRoomIsForNoRoom() throws {
        let grant = try Token(key: key).verify(raw(header: #"{"alg":"HS256"}"#, payload: #"{"role":"admin","exp":1900000000}"#), now: now)
        #expect(grant.scope == nil)
        #expect(grant.role(in: "main") == nil)
        #expect(!grant.isAdminOfEveryRoom)
    }
}

struct GrantTests {
    @Test func aGrantIsForItsRoomOrEveryRoom() {
        let one = Grant(role: .control, scope: .room("a"))
        #expect(one.role(in: "a") == .control)
        #expect(one.role(in: "b") == nil)
        #expect(Grant.operatorToken.role(in: "b") == .admin)
        #expect(Grant.operatorToken.isAdminOfEveryRoom)
        #expect(!Grant(role: .admin, scope: .room("a")).isAdminOfEveryRoom)
        #expect(RoomScope(claim: "*") == .every)
        #expect(RoomScope(claim: "") == nil)
    }

    @Test func viewersMaySendOnlySyncAndPing() {
        #expect(Role.view.maySend(.sync) && Role.view.maySend(.ping))
        #expect(!Role.view.maySend(.select(tab: "home")))
        #expect(!Role.view.maySend(.pop(tab: "home")))
        #expect(Role.control.maySend(.select(tab: "home")) && Role.admin.maySend(.select(tab: "home")))
    }
}

struct AuthenticatorTests {
    @Test func theBearerHeaderWinsOverTheQueryParameter() {
        #expect(Authenticator.credential(authorization: "Bearer abc", query: ["token": "q"]) == "abc")
        #expect(Authenticator.credential(authorization: "bearer  abc ", query: [:]) == "abc")
        #expect(Authenticator.credential(authorization: "Basic dXNlcjpwdw==", query: ["token": "q"]) == "q")
        #expect(Authenticator.credential(authorization: nil, query: [:]) == nil)
    }

    @Test func theOperatorTokenIsAdminOfEveryRoomAndNothingElseIsAcceptedWithoutAKey() {
        let auth = Authenticator(operatorToken: "s3cret", signingKey: nil)
        #expect(auth.isOn)
        #expect(auth.authenticate("s3cret", now: now) == .success(.operatorToken))
        #expect(auth.authenticate("s3cre", now: now) == .failure(.wrongToken))
        #expect(auth.authenticate("s3cretx", now: now) == .failure(.wrongToken))
        #expect(auth.authenticate(nil, now: now) == .failure(.missing))
        #expect(auth.authenticate("", now: now) == .failure(.missing))
        #expect(!Authenticator(operatorToken: nil, signingKey: nil).isOn)
    }

    @Test func bothCredentialsWorkTogether() {
        let auth = Authenticator(operatorToken: "s3cret", signingKey: key)
        let grant = Grant(role: .view, scope: .room("r"), expires: now + 5)
        #expect(auth.authenticate(Token(key: key).sign(grant, issuedAt: 0), now: now) == .success(grant))
        #expect(auth.authenticate("s3cret", now: now) == .success(.operatorToken))
        #expect(auth.authenticate("nope", now: now) == .failure(.malformed("a JWT has three parts separated by '.'")))
    }
}

struct SigningKeyTests {
    @Test func aKeyShorterThan32BytesIsRefused() {
        #expect(throws: SigningKey.Error.self) { try SigningKey(bytes: Array(repeating: 1, count: 31), source: "k") }
        #expect((try? SigningKey(bytes: Array(repeating: 1, count: 32), source: "k")) != nil)
    }

    @Test func oneFinalLineBreakOfATextKeyIsNotPartOfIt() {
        #expect(SigningKey.withoutFinalLineBreak(Array("abc\n".utf8)) == Array("abc".utf8))
        #expect(SigningKey.withoutFinalLineBreak(Array("abc\r\n".utf8)) == Array("abc".utf8))
        #expect(SigningKey.withoutFinalLineBreak(Array("abc\n\n".utf8)) == Array("abc\n\n".utf8))
        #expect(SigningKey.withoutFinalLineBreak([0x01, 0xff, 0x0a]) == [0x01, 0xff, 0x0a])
        #expect(SigningKey.withoutFinalLineBreak(Array("abc".utf8)) == Array("abc".utf8))
    }

    @Test func anUnreadableOrShortFileIsAnErrorNamingIt() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tabd-key-\(UInt64.random(in: 0...UInt64.max))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let missing = dir.appendingPathComponent("missing").path
        #expect(throws: SigningKey.Error.self) { try SigningKey.load(path: missing) }
        do { _ = try SigningKey.load(path: missing) } catch { #expect(error.description.contains(missing)) }
        let short = dir.appendingPathComponent("short").path
        try Data("0123456789\n".utf8).write(to: URL(fileURLWithPath: short))
        do { _ = try SigningKey.load(path: short); Issue.record("a 10-byte key was accepted") } catch {
            #expect(error.description.contains(short) && error.description.contains("10 bytes"))
        }
        let good = dir.appendingPathComponent("good").path
        try Data((String(repeating: "ab", count: 32) + "\n").utf8).write(to: URL(fileURLWithPath: good))
        #expect(try SigningKey.load(path: good).bytes.count == 64)
    }
}
