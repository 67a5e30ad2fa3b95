import Foundation
import Testing
@testable import TabdServer

/// The files tabd warns of at start when every user of the machine may read them
/// (``Options/warnIfOpenToEveryone(_:_:also:_:)``: the TLS key, an existing state file),
/// and the mode it reads: a link's target's, not the link's own.
@Suite struct FileModeWarningTests {
    /// A file with `mode` in a fresh temporary directory.
    func file(mode: Int) throws -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tabd-file-modes-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let path = dir.appendingPathComponent("key.pem").path
        #expect(FileManager.default.createFile(atPath: path, contents: Data("x".utf8), attributes: [.posixPermissions: mode]))
        return path
    }

    func warnings(_ path: String, also: String = "") -> [String] {
        var out: [String] = []
        Options().warnIfOpenToEveryone(path, "TLS key", also: also) { out.append($0) }
        return out
    }

    @Test(arguments: [(0o644, "read", "644"), (0o604, "read", "604"), (0o666, "read", "666"), (0o602, "written", "602")])
    func aFileEveryUserMayReadOrWriteIsWarnedOfWithItsModeAndTheFix(_ mode: Int, _ how: String, _ shown: String) throws {
        let path = try file(mode: mode)
        #expect(warnings(path) == ["the TLS key file '\(path)' can be \(how) by every user of this machine (mode \(shown)); chmod 600 it"])
        #expect(warnings(path, also: " (and its -wal and -shm files, if any)")
            == ["the TLS key file '\(path)' can be \(how) by every user of this machine (mode \(shown)); chmod 600 it (and its -wal and -shm files, if any)"])
    }

    /// Its owner's and its group's access are the operator's to give (DEPLOYING.md hands a
    /// key to a group of its own); a file that is not there is not tabd's to judge here.
    @Test(arguments: [0o600, 0o400, 0o640, 0o660, 0o601])
    func aFileOnlyItsOwnerAndGroupMayUseIsNot(_ mode: Int) throws {
        #expect(warnings(try file(mode: mode)).isEmpty)
    }

    @Test func aMissingFileIsNotAndALinkIsJudgedByItsTarget() throws {
        #expect(warnings("/nonexistent/tabd-\(UUID().uuidString)").isEmpty)
        let target = try file(mode: 0o600)
        let link = target + ".link"
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: target)
        #expect(warnings(link).isEmpty, "a link's own mode (777) is not its file's")
        #expect(Options.mode(of: link) == 0o600)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: target)
        #expect(warnings(link).count == 1)
    }
}
