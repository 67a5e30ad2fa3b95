import CBuildInfo

/// What this build of tabd is: the version of the checkout's `VERSION` file and the commit
/// it was built from. tabd, tabctl, the welcome's `server`, webhooks' `User-Agent` and the
/// Debian package all take it from here.
public enum BuildInfo {
    /// `0.2.0`: VERSION's first line.
    public static let version: String = {
        let text = String(cString: tabd_build_version())
        return String(text.prefix { $0 != "\n" && $0 != "\r" && $0 != " " })
    }()

    /// The commit (12 hex digits, `-dirty` when the checkout had changes), or `unknown`.
    public static let commit = String(cString: tabd_build_commit())

    /// `PROGRAM VERSION (commit COMMIT)`, what `--version` prints.
    public static func versionLine(_ program: String) -> String { "\(program) \(version) (commit \(commit))" }
}
