import BuildInfo
import FoundationEssentials
import Glibc
import Dispatch

/// The lines of `/metrics` about the process itself and what it was built from, under the
/// names Prometheus' own clients give them (`process_*`), and the TLS certificate's expiry:
/// what an operator's alerts page on.
enum ProcessMetrics {
    /// When this process started (seconds since 1970).
    static let started = Date().timeIntervalSince1970

    /// `certificateNotAfter`: when the TLS certificate in use expires (nil without TLS).
    static func text(certificateNotAfter: Double?) -> String {
        var out = """
        # HELP tabd_build_info The version (the VERSION file) and the commit this tabd was built from.
        # TYPE tabd_build_info gauge
        tabd_build_info{version="\(BuildInfo.version)",commit="\(BuildInfo.commit)"} 1
        # HELP process_start_time_seconds When the process started, in seconds since 1970.
        # TYPE process_start_time_seconds gauge
        process_start_time_seconds \(started)
        # HELP process_cpu_seconds_total CPU time the process has used, user and system.
        # TYPE process_cpu_seconds_total counter
        process_cpu_seconds_total \(cpuSeconds())
        # HELP process_resident_memory_bytes Resident memory of the process.
        # TYPE process_resident_memory_bytes gauge
        process_resident_memory_bytes \(residentBytes())
        # HELP process_open_fds Open file descriptors (connections, files, the engine's sockets).
        # TYPE process_open_fds gauge
        process_open_fds \(openFiles())
        # HELP process_max_fds The limit on open file descriptors (RLIMIT_NOFILE).
        # TYPE process_max_fds gauge
        process_max_fds \(maxFiles())

        """
        if let notAfter = certificateNotAfter {
            out += """
            # HELP tabd_tls_certificate_expiry_seconds When the TLS certificate in use expires, in seconds since 1970 (read again on SIGHUP).
            # TYPE tabd_tls_certificate_expiry_seconds gauge
            tabd_tls_certificate_expiry_seconds \(Int64(notAfter))

            """
        }
        return out
    }

    static func cpuSeconds() -> Double {
        var usage = rusage()
        guard getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage) == 0 else { return 0 }
        func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }

    /// From `/proc/self/statm` (pages), 0 where there is none.
    static func residentBytes() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// The entries of `/proc/self/fd`, less the one its listing holds open.
    static func openFiles() -> Int {
        guard let dir = opendir("/proc/self/fd") else { return 0 }
        defer { closedir(dir) }
        var count = 0
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name != ".", name != ".." { count += 1 }
        }
        return max(0, count - 1)
    }

    static func maxFiles() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 0 }
        return limit.rlim_cur > UInt(Int.max) ? Int.max : Int(limit.rlim_cur)
    }
}
