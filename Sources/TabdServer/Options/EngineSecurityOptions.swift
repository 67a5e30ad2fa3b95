import ArgumentParsing
import Auth
import Cluster
import FoundationEssentials
import Glibc
import Dispatch
import JetStream

extension Options {
    /// How this node reaches the cluster's engine, from the `--cluster-…` options: TLS and
    /// its files, a credentials file, or a user and the password read from its file (once,
    /// now; a trailing newline is dropped; an empty file is an error). Every file named
    /// must be readable now: a missing one is named before any connection is tried.
    /// Warnings (a secret readable by other users) go to `warn`.
    func engineSecurity(warn: (String) -> Void) throws(UsageError) -> EngineSecurity {
        var security = EngineSecurity(caFile: clusterTLSCA, certificateFile: clusterTLSCert, keyFile: clusterTLSKey)
        try Self.mustRead(clusterTLSCA, "CA file", "--cluster-tls-ca")
        try Self.mustRead(clusterTLSCert, "certificate file", "--cluster-tls-cert")
        try Self.mustRead(clusterTLSKey, "key file", "--cluster-tls-key")
        if let clusterTLSKey { warnIfShared(clusterTLSKey, "engine's TLS key", warn) }
        if let clusterCreds {
            try Self.mustRead(clusterCreds, "credentials file", "--cluster-creds")
            warnIfShared(clusterCreds, "engine's credentials", warn)
            security.credentials = .file(clusterCreds)
        }
        if let clusterUser, let clusterPasswordFile {
            try Self.mustRead(clusterPasswordFile, "password file", "--cluster-password-file")
            guard let data = FileManager.default.contents(atPath: clusterPasswordFile) else {
                throw UsageError("cannot read the engine's password file '\(clusterPasswordFile)' (--cluster-password-file)")
            }
            var bytes = data[...]
            if bytes.last == 0x0A { bytes.removeLast(); if bytes.last == 0x0D { bytes.removeLast() } }
            guard !bytes.isEmpty else {
                throw UsageError("the engine's password file '\(clusterPasswordFile)' (--cluster-password-file) is empty")
            }
            warnIfShared(clusterPasswordFile, "engine's password", warn)
            security.credentials = .user(clusterUser, password: String(decoding: bytes, as: UTF8.self))
        }
        return security
    }

    /// What this node believes of the engine: the keys of `--cluster-secret-file` (required;
    /// never one of the tokens' signing key) and `--cluster-unsigned`.
    func engineTrust(warn: (String) -> Void) throws(UsageError) -> EngineTrust {
        guard let clusterSecretFile else {
            throw UsageError("""
                a cluster node needs --cluster-secret-file (TABD_CLUSTER_SECRET_FILE): the keys its engine messages are \
                sealed with, the same file on every node. Make one with: \
                (umask 077; openssl rand -hex 32 > cluster-secret) (docs/CLUSTER.md)
                """)
        }
        let secret: ClusterSecret
        do { secret = try ClusterSecret.load(path: clusterSecretFile) } catch { throw UsageError("\(error.description) (--cluster-secret-file)") }
        warnIfShared(clusterSecretFile, "cluster secret", warn)
        var tokenKey: SigningKey?
        if let authSecretFile { tokenKey = try? SigningKey.load(path: authSecretFile) }
        else if let environmentSecret { tokenKey = try? SigningKey(bytes: Array(environmentSecret.utf8), source: "TABD_AUTH_SECRET") }
        if let tokenKey, secret.contains(tokenKey) {
            throw UsageError("the cluster secret file '\(clusterSecretFile)' holds the key that signs tokens (--auth-secret-file): give the cluster keys of its own")
        }
        if clusterAcceptUnsigned {
            warn("--cluster-unsigned accept: unsealed engine messages are believed too, so anyone who can publish to the engine can act as a node; "
                 + "this is the first phase of a move to sealed messages, not a way to run (docs/CLUSTER.md)")
        }
        return EngineTrust(secret: secret, acceptUnsigned: clusterAcceptUnsigned)
    }

    /// Throws, naming the file, its option and why, unless `path` (if any) is a file this
    /// process can read.
    private static func mustRead(_ path: String?, _ what: String, _ option: String) throws(UsageError) {
        guard let path else { return }
        let why: String?
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        if fd < 0 {
            why = String(cString: strerror(errno))
        } else {
            var info = stat()
            why = fstat(fd, &info) != 0 ? String(cString: strerror(errno)) : (info.st_mode & S_IFMT) == S_IFDIR ? "it is a directory" : nil
            close(fd)
        }
        if let why { throw UsageError("cannot read the engine's \(what) '\(path)' (\(option)): \(why)") }
    }
}
