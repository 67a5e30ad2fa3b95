#ifndef TABD_CWEBSOCKETS_SHIM_H
#define TABD_CWEBSOCKETS_SHIM_H

#include <libwebsockets.h>
#include <uv.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

/// LWS_PRE does not import into Swift: the headroom lws needs before every payload.
static inline size_t tabd_lws_pre(void) { return LWS_PRE; }

/// Writes bytes that are already framed (or an HTTP response) as they are, in one send.
/// LWS_WRITE_RAW (= LWS_WRITE_HTTP) bypasses ws framing; lws only reads `buf` and buffers any
/// unsent tail itself, so `buf` may be shared, immutable storage.
static inline int tabd_lws_write_raw(struct lws *wsi, const void *buf, size_t len) {
	return lws_write(wsi, (unsigned char *)buf, len, LWS_WRITE_RAW);
}

/// Closes `wsi` (without a close frame) once `secs` pass, unless it closes first.
static inline void tabd_lws_kill_after(struct lws *wsi, int secs) {
	lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, secs);
}

/// Shuts the socket down both ways: the peer reads what was sent and then the end of the
/// stream, and lws, reading that end, closes the connection.
static inline void tabd_drop_connection(struct lws *wsi) {
	int fd = lws_get_socket_fd(wsi);
	if (fd >= 0)
		shutdown(fd, SHUT_RDWR);
}

/// The close payload lws prepared for `wsi` (its own or the user's), and its length.
static inline size_t tabd_lws_close_payload(struct lws *wsi, const unsigned char **payload) {
	*payload = lws_get_close_payload(wsi);
	return (size_t)lws_get_close_length(wsi);
}

/// The lws log masks (macros, not imported).
static inline int tabd_lll_err(void) { return LLL_ERR; }
static inline int tabd_lll_warn(void) { return LLL_WARN; }
static inline int tabd_lll_notice(void) { return LLL_NOTICE; }
static inline int tabd_lll_info(void) { return LLL_INFO; }

/// SIGPIPE must not kill the process when a peer vanishes mid-write.
static inline void tabd_ignore_sigpipe(void) { signal(SIGPIPE, SIG_IGN); }

/// Client side: sends `len` bytes at `buf` as one text frame. lws masks the payload in place
/// and writes the header into the LWS_PRE bytes before `buf`, so `buf` must be private,
/// writable memory with that headroom.
static inline int tabd_lws_write_text(struct lws *wsi, unsigned char *buf, size_t len) {
	return lws_write(wsi, buf, len, LWS_WRITE_TEXT);
}

/// Client side: ends the connection at once, without a close frame (a peer that vanishes).
static inline void tabd_lws_abort_socket(struct lws *wsi) {
	int fd = lws_get_socket_fd(wsi);
	if (fd >= 0)
		shutdown(fd, SHUT_RDWR);
}

// MARK: Raw sockets, the server's own listener, and its tick

/// Hands an accepted, non-blocking socket to lws as a raw socket of `protocol` (lws reads
/// and writes it; tabd parses HTTP and WebSocket itself). On failure lws has closed `fd`.
/// With `tls`, lws does the TLS handshake first and then moves the decrypted bytes.
static inline struct lws *tabd_adopt_socket(struct lws_vhost *vh, int fd, const char *protocol, int tls) {
	lws_sock_file_fd_type d;
	d.sockfd = fd;
	return lws_adopt_descriptor_vhost(vh, tls ? LWS_ADOPT_SOCKET | LWS_ADOPT_ALLOW_SSL : LWS_ADOPT_SOCKET, d,
					  protocol, NULL);
}

/// The lws options for TLS (64-bit masks the Swift importer leaves as macros): the
/// context's OpenSSL initialization, and a vhost SSL_CTX whose certificate tabd sets itself.
static inline uint64_t tabd_option_ssl_global_init(void) { return LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT; }
static inline uint64_t tabd_option_vhost_ssl_ctx(void) { return LWS_SERVER_OPTION_CREATE_VHOST_SSL_CTX; }
/// A connection whose first byte is printable (not a TLS record) goes on without TLS; tabd
/// answers it only with a redirect to https (lws_is_ssl tells it apart).
static inline uint64_t tabd_option_http_on_https(void) {
	return LWS_SERVER_OPTION_ALLOW_NON_SSL_ON_SSL_PORT | LWS_SERVER_OPTION_ALLOW_HTTP_ON_HTTPS_LISTENER;
}

/// Hands tabd's listening socket to lws as a raw descriptor: lws only reports it readable
/// (LWS_CALLBACK_RAW_RX_FILE) and tabd accepts, so tabd decides when to stop accepting.
static inline struct lws *tabd_adopt_listener(struct lws_vhost *vh, int fd, const char *protocol) {
	lws_sock_file_fd_type d;
	d.filefd = fd;
	return lws_adopt_descriptor_vhost(vh, LWS_ADOPT_RAW_FILE_DESC, d, protocol, NULL);
}

/// accept4(), non-blocking and close-on-exec, with Nagle off (frames are small and
/// latency matters). Returns the fd, or -1 with errno set.
static inline int tabd_accept(int listener) {
	int fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd >= 0) {
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	}
	return fd;
}

static inline int tabd_errno(void) { return errno; }

/// Ends the sending side: the peer reads what was sent, then the end of the stream.
static inline void tabd_shutdown_write(struct lws *wsi) {
	int fd = lws_get_socket_fd(wsi);
	if (fd >= 0)
		shutdown(fd, SHUT_WR);
}

/// A periodic callback on the service thread, on lws' own timer list (one entry, whatever
/// the number of connections). `sul` must stay the first member.
struct tabd_tick {
	lws_sorted_usec_list_t sul;
	void (*fire)(void *user);
	void *user;
};

static void tabd_tick_fired(lws_sorted_usec_list_t *sul) {
	struct tabd_tick *tick = (struct tabd_tick *)sul;
	tick->fire(tick->user);
}

/// Calls `tick->fire(tick->user)` once, `us` microseconds from now.
static inline void tabd_tick_schedule(struct lws_context *context, struct tabd_tick *tick, int64_t us) {
	lws_sul_schedule(context, 0, &tick->sul, tabd_tick_fired, us);
}

static inline void tabd_tick_cancel(struct tabd_tick *tick) { lws_sul_cancel(&tick->sul); }

/// The lws option that selects libuv (a 64-bit mask the Swift importer leaves as a macro).
static inline uint64_t tabd_option_libuv(void) { return LWS_SERVER_OPTION_LIBUV; }

// MARK: The event pipe's second close on a libuv loop

/// lws 4.1 on a libuv loop closes a context's event pipe (an eventfd) twice when the context
/// is destroyed: at once (`lws_plat_pipe_close`), and again when libuv has closed the
/// pipe's handle (`__lws_close_free_wsi_final`, on a later pass of the loop). In between,
/// any thread of the process may be given the same fd number for a file of its own, which
/// the second close then takes from it: another context's socket vanishes behind its back
/// (lws asserts in `insert_wsi`, libuv crashes in `uv_poll_start`).
///
/// The guard finds the pipe's wsi when the context is made (the only wsi a new context
/// holds) and the place in it where lws keeps its fd (checked through
/// `lws_get_socket_fd`); `tabd_pipe_guard_disarm` marks that fd invalid once the first
/// close is done, so the second close does nothing.
struct tabd_pipe_guard {
	int *fd_field;
};

/// Call right after `lws_create_context`, before anything else uses the context. Returns 0
/// when the guard is armed.
static inline int tabd_pipe_guard_arm(struct lws_context *context, struct tabd_pipe_guard *guard) {
	struct rlimit limit;
	struct lws *pipe = NULL;
	struct dirent *entry;
	int fd = -1, found = 0;
	DIR *dir;

	guard->fd_field = NULL;
	if (getrlimit(RLIMIT_NOFILE, &limit) || !(dir = opendir("/proc/self/fd")))
		return -1;
	while ((entry = readdir(dir))) {
		char *end;
		long n = strtol(entry->d_name, &end, 10);
		struct lws *wsi;
		if (end == entry->d_name || *end || n < 0 || (rlim_t)n >= limit.rlim_cur)
			continue;
		wsi = wsi_from_fd(context, (int)n);
		if (wsi) {
			pipe = wsi;
			fd = (int)n;
			found++;
		}
	}
	closedir(dir);
	if (found != 1 || lws_get_socket_fd(pipe) != fd)
		return -1;
	/* The fd field is inside struct lws: the first int holding the fd that lws reads back
	 * as the wsi's fd is it. */
	for (size_t offset = 0; offset < 16384; offset += sizeof(int)) {
		int *field = (int *)(void *)((char *)pipe + offset);
		int seen;
		if (*field != fd)
			continue;
		*field = -2;
		seen = lws_get_socket_fd(pipe);
		*field = fd;
		if (seen == -2) {
			guard->fd_field = field;
			return 0;
		}
	}
	return -1;
}

/// Call right after the first `lws_context_destroy` (the pipe's fd is closed; its wsi lives
/// until libuv's close callback).
static inline void tabd_pipe_guard_disarm(struct tabd_pipe_guard *guard) {
	if (guard->fd_field)
		*guard->fd_field = -1; /* LWS_SOCK_INVALID */
	guard->fd_field = NULL;
}

#endif
