/*
 * evloop-load: load driver for evloop-server (plain sockets and epoll, no
 * lws, one thread).
 *
 *   evloop-load --port P --pid SERVERPID --server-log FILE
 *               [--n N] [--m M] [--burst B] [--msg BYTES] [--idle-ms MS]
 *               [--bulk BYTES [--bulk-read-delay-ms MS]]
 *
 * Phases, in order:
 *   connect  open N connections in bursts of B in flight (nonblocking
 *            connect, then one echo of a BYTES-byte message on each; a
 *            connection counts once its echo is back); the time for all N.
 *            The server's RSS before and after (settled) gives RSS / conn.
 *   idle     the server's CPU over MS ms with the N connections idle (its
 *            background cost, e.g. the waker thread's lws_cancel_service()).
 *   echo     on one more connection, M sequential round trips of BYTES
 *            bytes: round trips per second, and the server's CPU per round
 *            trip from /proc/PID/stat utime+stime (10 ms ticks) and from the
 *            service thread's /proc/PID/task/PID/schedstat (ns).
 *   bulk     (only with --bulk) BYTES written on the echo connection as fast
 *            as the server takes them while reading the echo back, reading
 *            only after --bulk-read-delay-ms (so that the server's queue
 *            grows and it applies rx flow control); reports MB/s and the
 *            longest time without progress once reading has started (a
 *            stall detector).
 *   vanish   every socket gets SO_LINGER {1, 0} and is closed (RST); then
 *            FILE (the server's stderr) is followed until the server prints
 *            "t=T open=0" with T after the first close: the time to notice
 *            N connections vanishing, and the server CPU spent on it.  Then
 *            a new connection and one echo on it: the time until the server
 *            serves again (lws may still be finishing the closes after its
 *            last RAW_CLOSE callback, as it does with libuv).
 *
 * Output: progress on stderr, and one line on stdout:
 *   RESULT key=value ...
 * Every wait is bounded; on a failure the program prints why and exits 1.
 */

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PHASE_TIMEOUT 300.0	/* seconds, for any one phase */
#define STALL_TIMEOUT 20.0	/* seconds without progress */

static int port, server_pid, n_conns = 10, m_echo = 20000, burst = 200;
static int msg_len = 100, idle_ms = 1000;
static long bulk_bytes;
static int bulk_read_delay_ms;
static const char *server_log;
static unsigned char msg[65536];

static double
now_mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
die(const char *what)
{
	fprintf(stderr, "evloop-load: %s%s%s\n", what, errno ? ": " : "",
		errno ? strerror(errno) : "");
	exit(1);
}

/* ---- the server process, seen from /proc --------------------------- */

/* utime + stime of the whole process, in clock ticks */
static long long
server_cpu_ticks(void)
{
	char path[64], buf[2048], *p;
	long long ut = 0, st = 0;
	FILE *f;
	int i;

	snprintf(path, sizeof(path), "/proc/%d/stat", server_pid);
	f = fopen(path, "r");
	if (!f || !fgets(buf, sizeof(buf), f))
		die("read /proc/PID/stat");
	fclose(f);
	p = strrchr(buf, ')');	/* the command name may hold spaces */
	if (!p)
		die("parse /proc/PID/stat");
	p += 2;			/* field 3, state */
	for (i = 3; i < 14; i++) {
		p = strchr(p, ' ');
		if (!p)
			die("parse /proc/PID/stat");
		p++;
	}
	if (sscanf(p, "%lld %lld", &ut, &st) != 2)
		die("parse /proc/PID/stat");
	return ut + st;
}

/* on-CPU time of the service (main) thread, ns */
static long long
server_thread_ns(void)
{
	char path[64];
	long long ns = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", server_pid,
		 server_pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%lld", &ns) != 1)
		ns = -1;
	fclose(f);
	return ns;
}

static long
server_rss_kb(void)
{
	char path[64], line[256];
	long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", server_pid);
	f = fopen(path, "r");
	if (!f)
		die("read /proc/PID/status");
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			kb = atol(line + 6);
	fclose(f);
	return kb;
}

/* ---- sockets -------------------------------------------------------- */

static struct sockaddr_in server_addr;

static int
tcp_socket(int nonblock)
{
	int fd = socket(AF_INET, SOCK_STREAM | (nonblock ? SOCK_NONBLOCK : 0),
			0), one = 1;

	if (fd < 0)
		die("socket");
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

struct conn {
	int fd;
	int got;		/* echo bytes received */
	int sent;
};

static struct conn *conns;
static int echo_fd = -1;

/*
 * Open conns[first .. first+count) concurrently: connect, send msg, wait for
 * the echo.  Returns when all of them have their echo back.
 */
static void
open_burst(int ep, int first, int count)
{
	struct epoll_event ev, evs[256];
	int left = count, i, n;
	double last_progress = now_mono();

	for (i = first; i < first + count; i++) {
		struct conn *c = &conns[i];

		c->fd = tcp_socket(1);
		c->got = c->sent = 0;
		if (connect(c->fd, (struct sockaddr *)&server_addr,
			    sizeof(server_addr)) && errno != EINPROGRESS)
			die("connect");
		ev.events = EPOLLOUT;
		ev.data.u32 = (uint32_t)i;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev))
			die("epoll_ctl add");
	}

	while (left) {
		n = epoll_wait(ep, evs, 256, 1000);
		if (n < 0 && errno != EINTR)
			die("epoll_wait");
		if (n <= 0) {
			if (now_mono() - last_progress > STALL_TIMEOUT) {
				errno = 0;
				die("connect phase: no progress");
			}
			continue;
		}
		last_progress = now_mono();
		for (i = 0; i < n; i++) {
			struct conn *c = &conns[evs[i].data.u32];
			unsigned char buf[65536];
			int err = 0;
			socklen_t el = sizeof(err);
			ssize_t r;

			if (evs[i].events & (EPOLLERR | EPOLLHUP)) {
				getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err,
					   &el);
				errno = err;
				die("connect phase: connection failed");
			}
			if (!c->sent && (evs[i].events & EPOLLOUT)) {
				if (send(c->fd, msg, (size_t)msg_len, 0) !=
				    msg_len)
					die("send (connect phase)");
				c->sent = 1;
				ev.events = EPOLLIN;
				ev.data.u32 = evs[i].data.u32;
				epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
				continue;
			}
			if (!(evs[i].events & EPOLLIN))
				continue;
			r = recv(c->fd, buf, sizeof(buf), 0);
			if (r <= 0) {
				if (r < 0 && errno == EAGAIN)
					continue;
				if (!r)
					errno = 0;
				die("recv (connect phase): closed by server");
			}
			if (memcmp(buf, msg + c->got, (size_t)r)) {
				errno = 0;
				die("connect phase: echo differs");
			}
			c->got += (int)r;
			if (c->got >= msg_len) {
				/* done: idle from now on, no longer watched */
				epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
				left--;
			}
		}
	}
}

static void
recv_exact(int fd, unsigned char *buf, int len)
{
	int got = 0;

	while (got < len) {
		ssize_t r = recv(fd, buf + got, (size_t)(len - got), 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (!r)
				errno = 0;
			die("recv (echo phase; SO_RCVTIMEO is 10 s)");
		}
		got += (int)r;
	}
}

/* The bulk phase: write bulk_bytes, read them back, watch for stalls. */
static void
bulk_phase(double *mb_s, double *longest_stall)
{
	unsigned char rbuf[65536];
	long sent = 0, got = 0;
	double t0 = now_mono(), last = t0, stall = 0;
	double read_at = t0 + bulk_read_delay_ms / 1000.0;
	int ep = epoll_create1(0), fl, reading = 0;
	struct epoll_event ev, evs[2];

	fl = fcntl(echo_fd, F_GETFL);
	fcntl(echo_fd, F_SETFL, fl | O_NONBLOCK);
	ev.events = EPOLLOUT;
	ev.data.u32 = 0;
	epoll_ctl(ep, EPOLL_CTL_ADD, echo_fd, &ev);

	while (got < bulk_bytes) {
		int n = epoll_wait(ep, evs, 2, 10), i;
		double t = now_mono();

		if (!reading && t >= read_at) {
			reading = 1;
			last = t;
			ev.events = EPOLLIN | (sent < bulk_bytes ? EPOLLOUT : 0);
			epoll_ctl(ep, EPOLL_CTL_MOD, echo_fd, &ev);
		}
		if (!reading) {
			last = t;	/* a pause we asked for */
		} else if (t - last > stall)
			stall = t - last;
		if (t - last > STALL_TIMEOUT) {
			errno = 0;
			fprintf(stderr, "bulk: sent %ld got %ld\n", sent, got);
			die("bulk phase: no progress");
		}
		for (i = 0; i < n; i++) {
			if ((evs[i].events & EPOLLOUT) && sent < bulk_bytes) {
				size_t w = sizeof(msg);
				ssize_t r;

				if ((long)w > bulk_bytes - sent)
					w = (size_t)(bulk_bytes - sent);
				r = send(echo_fd, msg, w, 0);
				if (r > 0) {
					sent += r;
					last = now_mono();
				}
				if (sent == bulk_bytes) {
					ev.events = reading ? EPOLLIN : 0;
					epoll_ctl(ep, EPOLL_CTL_MOD, echo_fd,
						  &ev);
				}
			}
			if (evs[i].events & EPOLLIN) {
				ssize_t r = recv(echo_fd, rbuf, sizeof(rbuf),
						 0);

				if (r == 0) {
					errno = 0;
					die("bulk phase: closed by server");
				}
				if (r > 0) {
					got += r;
					last = now_mono();
				}
			}
		}
	}
	*mb_s = (double)bulk_bytes / (now_mono() - t0) / 1e6;
	*longest_stall = stall;
	fcntl(echo_fd, F_SETFL, fl);
	close(ep);
}

/*
 * Follow the server's log from its current end (remembered in *off) until a
 * line "t=T open=0" with T >= since; returns T.
 */
static double
wait_server_open_zero(long *off, double since)
{
	double deadline = now_mono() + PHASE_TIMEOUT;
	char line[512];
	FILE *f = fopen(server_log, "r");

	if (!f)
		die("open server log");
	while (now_mono() < deadline) {
		fseek(f, *off, SEEK_SET);
		while (fgets(line, sizeof(line), f)) {
			double t;
			int open;

			if (!strchr(line, '\n'))
				break;	/* partial line: read again later */
			*off = ftell(f);
			if (sscanf(line, "t=%lf open=%d", &t, &open) == 2 &&
			    open == 0 && t >= since) {
				fclose(f);
				return t;
			}
		}
		clearerr(f);
		usleep(500);
	}
	fclose(f);
	errno = 0;
	die("server did not report open=0");
	return 0;
}

static long
file_size(const char *path)
{
	FILE *f = fopen(path, "r");
	long s;

	if (!f)
		die("open server log");
	fseek(f, 0, SEEK_END);
	s = ftell(f);
	fclose(f);
	return s;
}

static void
usage(void)
{
	fprintf(stderr, "usage: evloop-load --port P --pid SERVERPID "
		"--server-log FILE [--n N] [--m M] [--burst B] [--msg BYTES] "
		"[--idle-ms MS] [--bulk BYTES [--bulk-read-delay-ms MS]]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	struct rlimit rl;
	struct linger lg = { 1, 0 };
	struct timeval tv = { 10, 0 };
	unsigned char buf[65536];
	double t0, t1, connect_s, echo_s, idle_s, vanish_t0, vanish_closed;
	double vanish_zero, bulk_mb_s = 0, bulk_stall = 0;
	double t_connect, t_idle, t_echo, t_end;	/* phase starts */
	long long c0, c1, ns0, ns1, cpu_idle, cv0, cv1;
	long rss0, rss1, log_off;
	long tck = sysconf(_SC_CLK_TCK);
	int ep, i, done;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!v)
			usage();
		if (!strcmp(a, "--port"))
			port = atoi(v);
		else if (!strcmp(a, "--pid"))
			server_pid = atoi(v);
		else if (!strcmp(a, "--server-log"))
			server_log = v;
		else if (!strcmp(a, "--n"))
			n_conns = atoi(v);
		else if (!strcmp(a, "--m"))
			m_echo = atoi(v);
		else if (!strcmp(a, "--burst"))
			burst = atoi(v);
		else if (!strcmp(a, "--msg"))
			msg_len = atoi(v);
		else if (!strcmp(a, "--idle-ms"))
			idle_ms = atoi(v);
		else if (!strcmp(a, "--bulk"))
			bulk_bytes = atol(v);
		else if (!strcmp(a, "--bulk-read-delay-ms"))
			bulk_read_delay_ms = atoi(v);
		else
			usage();
		i++;
	}
	if (port <= 0 || server_pid <= 0 || !server_log || n_conns < 0 ||
	    burst <= 0 || burst > 256 || msg_len <= 0 ||
	    msg_len > (int)sizeof(msg))
		usage();

	/* one fd per connection: raise the soft limit to the hard one */
	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	if ((long)rl.rlim_cur < n_conns + 64) {
		errno = 0;
		die("ulimit -n too low for --n");
	}

	for (i = 0; i < (int)sizeof(msg); i++)
		msg[i] = (unsigned char)('a' + i % 26);
	memset(&server_addr, 0, sizeof(server_addr));
	server_addr.sin_family = AF_INET;
	server_addr.sin_port = htons((uint16_t)port);
	server_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

	conns = calloc((size_t)n_conns + 1, sizeof(*conns));
	ep = epoll_create1(0);
	if (!conns || ep < 0)
		die("setup");

	/* ---- connect ---- */
	rss0 = server_rss_kb();
	t0 = t_connect = now_mono();
	for (done = 0; done < n_conns; done += burst)
		open_burst(ep, done,
			   n_conns - done < burst ? n_conns - done : burst);
	connect_s = now_mono() - t0;
	fprintf(stderr, "connect: %d connections in %.3f s\n", n_conns,
		connect_s);
	usleep(300 * 1000);		/* let the server settle */
	rss1 = server_rss_kb();

	/* ---- idle ---- */
	c0 = server_cpu_ticks();
	t0 = t_idle = now_mono();
	usleep((useconds_t)idle_ms * 1000);
	idle_s = now_mono() - t0;
	cpu_idle = server_cpu_ticks() - c0;

	/* ---- echo ---- */
	t_echo = now_mono();
	echo_fd = tcp_socket(0);
	setsockopt(echo_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(echo_fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(echo_fd, (struct sockaddr *)&server_addr,
		    sizeof(server_addr)))
		die("connect (echo)");
	for (i = 0; i < 200; i++) {		/* warm up */
		if (send(echo_fd, msg, (size_t)msg_len, 0) != msg_len)
			die("send (echo)");
		recv_exact(echo_fd, buf, msg_len);
	}
	c0 = server_cpu_ticks();
	ns0 = server_thread_ns();
	t0 = now_mono();
	for (i = 0; i < m_echo; i++) {
		if (send(echo_fd, msg, (size_t)msg_len, 0) != msg_len)
			die("send (echo)");
		recv_exact(echo_fd, buf, msg_len);
	}
	t1 = now_mono();
	c1 = server_cpu_ticks();
	ns1 = server_thread_ns();
	echo_s = t1 - t0;
	if (memcmp(buf, msg, (size_t)msg_len)) {
		errno = 0;
		die("echo differs");
	}
	fprintf(stderr, "echo: %d round trips in %.3f s\n", m_echo, echo_s);

	/* ---- bulk ---- */
	if (bulk_bytes > 0) {
		bulk_phase(&bulk_mb_s, &bulk_stall);
		fprintf(stderr, "bulk: %ld bytes, %.1f MB/s, longest stall "
			"%.3f s\n", bulk_bytes, bulk_mb_s, bulk_stall);
	}

	/* ---- vanish ---- */
	conns[n_conns].fd = echo_fd;
	for (i = 0; i <= n_conns; i++)
		setsockopt(conns[i].fd, SOL_SOCKET, SO_LINGER, &lg,
			   sizeof(lg));
	log_off = file_size(server_log);
	cv0 = server_cpu_ticks();
	vanish_t0 = now_mono();
	for (i = 0; i <= n_conns; i++)
		close(conns[i].fd);
	vanish_closed = now_mono();
	vanish_zero = wait_server_open_zero(&log_off, vanish_t0);
	cv1 = server_cpu_ticks();

	/* serving again? */
	echo_fd = tcp_socket(0);
	setsockopt(echo_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(echo_fd, (struct sockaddr *)&server_addr,
		    sizeof(server_addr)))
		die("connect (after vanish)");
	if (send(echo_fd, msg, (size_t)msg_len, 0) != msg_len)
		die("send (after vanish)");
	recv_exact(echo_fd, buf, msg_len);
	t_end = now_mono();
	close(echo_fd);
	fprintf(stderr, "vanish: %d connections reset; server at 0 after "
		"%.3f s\n", n_conns + 1, vanish_zero - vanish_t0);

	printf("RESULT n=%d m=%d connect_s=%.3f rss_kb_before=%ld "
	       "rss_kb_after=%ld rss_b_per_conn=%.0f "
	       "idle_cpu_ms_per_s=%.1f "
	       "echo_per_s=%.0f cpu_us_per_echo=%.1f "
	       "svc_thread_us_per_echo=%.1f cpu_ticks_echo=%lld "
	       "bulk_mb_s=%.1f bulk_longest_stall_s=%.3f "
	       "vanish_close_s=%.3f vanish_s=%.3f vanish_cpu_ms=%.0f "
	       "vanish_serving_s=%.3f "
	       "t_connect=%.6f t_idle=%.6f t_echo=%.6f t_vanish=%.6f "
	       "t_end=%.6f\n",
	       n_conns, m_echo, connect_s, rss0, rss1,
	       n_conns ? (double)(rss1 - rss0) * 1024.0 / n_conns : 0.0,
	       (double)cpu_idle * 1000.0 / (double)tck / idle_s,
	       m_echo / echo_s,
	       (double)(c1 - c0) * 1e6 / (double)tck / m_echo,
	       ns0 >= 0 ? (double)(ns1 - ns0) / 1e3 / m_echo : -1.0,
	       c1 - c0, bulk_mb_s, bulk_stall,
	       vanish_closed - vanish_t0, vanish_zero - vanish_t0,
	       (double)(cv1 - cv0) * 1000.0 / (double)tck,
	       t_end - vanish_t0, t_connect, t_idle, t_echo, vanish_t0, t_end);
	return 0;
}
