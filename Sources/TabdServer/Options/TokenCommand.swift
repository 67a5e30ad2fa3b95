import ArgumentParsing
import Auth
import Coordinator
import FoundationEssentials
import Glibc
import Dispatch

/// `tabd token`: prints a signed token for scripts and operators.
public enum TokenCommand {
    static let help = """
    USAGE: tabd token (--secret-file FILE | --private-key FILE) --room ID --role ROLE
                      [--kid ID] [--iss ISS] [--aud AUD] [--name NAME] [--ttl DURATION]

    Prints a token signed with the key in FILE: an HS256 secret (the key tabd reads with
    --auth-secret-file or a key set's secret_file; TABD_AUTH_SECRET when neither option
    is given), or a PEM private key, EC P-256 (ES256) or RSA (RS256), whose public key is
    in tabd's --auth-keys.

    OPTIONS:
      --secret-file FILE     the HS256 signing key (at least 32 bytes)
      --private-key FILE     an unencrypted PEM private key: EC P-256 signs ES256,
                             RSA (2048 bits or more) RS256
      --kid ID               the key's id in tabd's key set (the header's kid)
      --iss ISS, --aud AUD   the issuer and audience claims
      --room ID              the room it is for, or '*' for every room
      --role ROLE            view (receive only), control (every command of the room)
                             or admin (also the HTTP API and /metrics)
      --name NAME            the display name its holder gets in the room
      --ttl DURATION         how long it is valid: 90s, 30m, 12h, 7d, or seconds
                             (default 1h, at most 366d)
      -h, --help             show this help
    """

    /// The exit text and code of `tabd token ARGS`.
    public static func run(_ args: [String], environment: [String: String], now: Date = Date()) -> (text: String, code: Int32) {
        var secretFile: String?, privateKeyFile: String?, kid: String?, issuer: String?, audience: String?
        var room: String?, role: Role?, name: String?, ttl = 3600
        var line = Arguments(args)
        func value(_ name: String) throws(UsageError) -> String { try line.value(of: name) }
        do {
            while let arg = line.next() {
                switch arg {
                case "-h", "--help": return (help, 0)
                case "--secret-file": secretFile = try value(arg)
                case "--private-key": privateKeyFile = try value(arg)
                case "--kid": kid = try value(arg)
                case "--iss": issuer = try value(arg)
                case "--aud": audience = try value(arg)
                case "--room":
                    let v = try value(arg)
                    guard RoomScope(claim: v) != nil else { throw UsageError("--room must be a room id (1 to 64 of A-Z a-z 0-9 _ -) or '*', got '\(v.prefix(80))'") }
                    room = v
                case "--role":
                    let v = try value(arg)
                    guard let r = Role(rawValue: v) else { throw UsageError("--role must be view, control or admin, got '\(v.prefix(40))'") }
                    role = r
                case "--name":
                    let v = try value(arg)
                    guard v.unicodeScalars.count <= Limits.maxClientNameLength else {
                        throw UsageError("--name may have at most \(Limits.maxClientNameLength) characters")
                    }
                    name = v
                case "--ttl":
                    let v = try value(arg)
                    guard let seconds = duration(v), seconds >= 1, seconds <= 366 * 86_400 else {
                        throw UsageError("--ttl must be a duration from 1s to 366d (90s, 30m, 12h, 7d), got '\(v.prefix(40))'")
                    }
                    ttl = seconds
                default: throw UsageError("unknown option '\(arg.prefix(80))'")
                }
            }
            guard let room else { throw UsageError("--room is required") }
            guard let role else { throw UsageError("--role is required") }
            guard secretFile == nil || privateKeyFile == nil else { throw UsageError("give --secret-file or --private-key, not both") }
            let signer: Token.Signer
            do {
                if let privateKeyFile {
                    guard let pem = FileManager.default.contents(atPath: privateKeyFile) else {
                        throw UsageError("cannot read the private key '\(privateKeyFile)'")
                    }
                    signer = .privateKey(try AsymmetricKey.privateKey(pem: Array(pem), source: "the private key '\(privateKeyFile)'"))
                } else if let secretFile { signer = .secret(try SigningKey.load(path: secretFile)) } else if let secret = environment["TABD_AUTH_SECRET"], !secret.isEmpty {
                    signer = .secret(try SigningKey(bytes: Array(secret.utf8), source: "TABD_AUTH_SECRET"))
                } else { throw UsageError("--secret-file or --private-key is required (or TABD_AUTH_SECRET)") }
            } catch let e as SigningKey.Error { throw UsageError(e.description) } catch let e as AsymmetricKey.Error { throw UsageError(e.description) }
            let issued = Int(now.timeIntervalSince1970)
            let grant = Grant(role: role, scope: RoomScope(claim: room), name: name, expires: Double(issued + ttl))
            do {
                return (try Token.sign(grant, issuedAt: issued, with: signer, keyID: kid, issuer: issuer, audience: audience), 0)
            } catch { throw UsageError(error.description) }
        } catch let e as UsageError {
            return ("tabd token: \(e.message)\nRun 'tabd token --help' for the options.", 2)
        } catch {
            return ("tabd token: \(error)", 2)
        }
    }

    /// Seconds in `90s`, `30m`, `12h`, `7d` or `3600`; nil for anything else.
    static func duration(_ text: String) -> Int? {
        let units: [Character: Int] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
        var digits = Substring(text), unit = 1
        if let last = text.last, let u = units[last] { digits = text.dropLast(); unit = u }
        guard !digits.isEmpty, digits.count <= 9, digits.allSatisfy(\.isASCII), let n = Int(digits) else { return nil }
        return n * unit
    }
}
