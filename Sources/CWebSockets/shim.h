#ifndef TABD_CWEBSOCKETS_SHIM_H
#define TABD_CWEBSOCKETS_SHIM_H

#include <libwebsockets.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>

/// LWS_PRE does not import into Swift: the headroom lws needs before every payload.
static inline size_t tabd_lws_pre(void) { return LWS_PRE; }

/// Writes bytes that are already framed (or an HTTP response) as they are, in one send.
/// LWS_WRITE_RAW (= LWS_WRITE_HTTP) bypasses ws framing; lws only reads `buf` and buffers any
/// unsent tail itself, so `buf` may be shared, immutable storage.
static inline int tabd_lws_write_raw(struct lws *wsi, const void *buf, size_t len) {
	return lws_write(wsi, (unsigned char *)buf, len, LWS_WRITE_RAW);
}

/// Sets the close code and reason (at most 123 bytes) that the next close of `wsi` sends.
static inline void tabd_lws_close_reason(struct lws *wsi, unsigned short code,
					 const void *reason, size_t len) {
	if (len > 123)
		len = 123;
	lws_close_reason(wsi, (enum lws_close_status)code, (unsigned char *)reason, len);
}

/// Closes `wsi` (without a close frame) once `secs` pass, unless it closes first.
static inline void tabd_lws_kill_after(struct lws *wsi, int secs) {
	lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, secs);
}

/// Fails a connection at once (RFC 6455 7.1.7): writes a close frame with `code` and
/// `reason` (at most 123 bytes) straight to the socket and shuts down the sending side, so
/// the peer reads the close and then end of stream without waiting for its answer; lws'
/// own later write fails and it drops the connection. Nothing is written when lws still
/// holds unsent bytes of an earlier frame (the close would land inside it): then lws'
/// own close and timeout apply. Returns 0 when the frame went out whole.
static inline int tabd_fail_connection(struct lws *wsi, unsigned short code,
				       const void *reason, size_t len) {
	unsigned char frame[4 + 123];
	int fd = lws_get_socket_fd(wsi);
	if (fd < 0 || lws_partial_buffered(wsi))
		return -1;
	if (len > 123)
		len = 123;
	frame[0] = 0x88;
	frame[1] = (unsigned char)(2 + len);
	frame[2] = (unsigned char)(code >> 8);
	frame[3] = (unsigned char)(code & 0xff);
	memcpy(frame + 4, reason, len);
	if (send(fd, frame, 4 + len, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)(4 + len))
		return -1;
	shutdown(fd, SHUT_WR);
	return 0;
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

#endif
