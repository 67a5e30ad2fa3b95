import ArgumentParsing
import Foundation
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
