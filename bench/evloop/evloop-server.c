/*
 * evloop-server: a raw-socket echo server on libwebsockets 4.1 (Debian
 * bookworm's 4.1.6), with a selectable event loop, for the evloop benchmark.
 *
 *   evloop-server --port P [--loop poll|uv|ev] [--fd-table T]
 *                 [--wake-ms MS] [--destroy sul|cancelled|outside]
 *
 * One vhost on 127.0.0.1:P; every accepted socket is bound to the "raw-skt"
 * role and the "echo" protocol below, which sends back every byte it
 * receives.  Nothing here parses HTTP: this is the layer tabd's own
 * HTTP/WebSocket parser would sit on.
 *
 *   --loop poll   lws's default poll() backend, driven by lws_service().
 *   --loop uv     LWS_SERVER_OPTION_LIBUV on a *foreign* uv loop that this
 *                 program owns and drives with uv_run(UV_RUN_ONCE).
 *   --loop ev     LWS_SERVER_OPTION_LIBEV on a foreign ev_loop_new() loop,
 *                 driven with ev_run(EVRUN_ONCE).
 *
 *   --fd-table T  size of lws's fd -> wsi table.  lws sizes it from the
 *                 soft RLIMIT_NOFILE (sysconf(_SC_OPEN_MAX)) at
 *                 lws_create_context(); we set the soft limit to T just for
 *                 that call and raise it back to the hard limit afterwards.
 *                 (info.fd_limit_per_thread < ulimit -n would instead switch
 *                 lws to a linear scan of the table on every fd lookup.)
 *
 *   --wake-ms MS  a second thread calls lws_cancel_service() every MS ms
 *                 (0: never); the service thread counts the
 *                 LWS_CALLBACK_EVENT_WAIT_CANCELLED it receives.
 *
 *   --destroy     where lws_context_destroy() is first called on SIGTERM:
 *                 sul       from a lws_sul callback scheduled by the
 *                           EVENT_WAIT_CANCELLED that carries the stop;
 *                 cancelled directly from that EVENT_WAIT_CANCELLED;
 *                 outside   from the program's loop, between two RUN_ONCE
 *                           iterations (not inside any lws callback).
 *
 * stderr lines (all times CLOCK_MONOTONIC seconds, comparable across
 * processes):
 *   ready t=... pid=... loop=... port=...
 *   t=... open=N          when the open count moved by >= 1000, or is 0
 *   stop: ...             the destroy sequence, step by step, and its results;
 *                         then the wake-up statistics (waker calls, the
 *                         EVENT_WAIT_CANCELLED that answered them, their
 *                         latency) and the rx flow control count
 *
 * Stop with SIGTERM or SIGINT.  The handler only writes to a pipe; lws's own
 * signal handling is not used (a foreign loop keeps lws from installing it).
 */

#include <libwebsockets.h>
#include <uv.h>
#include <ev.h>

#include <errno.h>
#include <pthread.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

enum loop_kind { LOOP_POLL, LOOP_UV, LOOP_EV };
enum destroy_kind { DESTROY_SUL, DESTROY_CANCELLED, DESTROY_OUTSIDE };

static const char *loop_names[] = { "poll", "uv", "ev" };

/* Everything below is touched by the service thread only, unless atomic. */
static struct lws_context *context;	/* lws sets it to NULL (info.pcontext)
					 * when the context is finally freed */
static enum loop_kind loop_kind = LOOP_POLL;
static enum destroy_kind destroy_kind = DESTROY_SUL;
static uv_loop_t uv_loop;
static struct ev_loop *ev_loop_p;

static int open_conns, open_reported;	/* reported: last value printed */
static long cancelled_seen;		/* EVENT_WAIT_CANCELLED received */
static long wakes_answered;		/* ... that answered a waker call */
static double wake_latency_sum, wake_latency_max, wake_latency_max_at;
static int destroy_scheduled;		/* destroy sul scheduled */
static int destroy_started;		/* lws_context_destroy() called */
static int protocol_destroyed;		/* LWS_CALLBACK_PROTOCOL_DESTROY seen */
static long flow_offs;			/* times rx flow control engaged */
static lws_sorted_usec_list_t destroy_sul;

static int sig_pipe[2] = { -1, -1 };	/* signal handler -> waker thread */
static atomic_int stop_requested;	/* set by the waker thread on a signal */
static atomic_long wakes_sent;		/* waker's lws_cancel_service() calls */
static _Atomic double wake_pending_since; /* first unanswered call, or 0 */
static pthread_t waker;
static int waker_running;
static int wake_ms = 10;

static double
now_mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------------
 * The echo protocol.  Per connection: the bytes received and not yet written
 * back, in a heap buffer with LWS_PRE bytes of headroom (lws_write's
 * convention), freed when drained so that idle connections hold none.
 */

struct pss {
	unsigned char *buf;	/* LWS_PRE + cap bytes, or NULL */
	size_t len, cap;	/* queued bytes, capacity after LWS_PRE */
	int flow_off;		/* rx flow control applied */
};

#define QUEUE_HIGH (256 * 1024)	/* stop reading a peer that does not read */

/* called on every change of open_conns: print when it moved by >= 1000
 * since the last line, or reached 0 */
static void
note_open_count(void)
{
	int d = open_conns - open_reported;

	if (d >= 1000 || d <= -1000 || open_conns == 0) {
		fprintf(stderr, "t=%.6f open=%d\n", now_mono(), open_conns);
		open_reported = open_conns;
	}
}

static void start_destroy(const char *where);

static void
destroy_from_sul(lws_sorted_usec_list_t *sul)
{
	(void)sul;
	start_destroy("a lws_sul callback");
}

static int
callback_echo(struct lws *wsi, enum lws_callback_reasons reason, void *user,
	      void *in, size_t len)
{
	struct pss *pss = (struct pss *)user;
	unsigned char *nb;
	size_t want;
	int n;

	switch (reason) {
	case LWS_CALLBACK_RAW_ADOPT:
		memset(pss, 0, sizeof(*pss));
		open_conns++;
		note_open_count();
		break;

	case LWS_CALLBACK_RAW_RX:
		want = pss->len + len;
		if (want > pss->cap) {
			size_t cap = pss->cap ? pss->cap : 128;

			while (cap < want)
				cap *= 2;
			nb = realloc(pss->buf, LWS_PRE + cap);
			if (!nb)
				return -1;
			pss->buf = nb;
			pss->cap = cap;
		}
		memcpy(pss->buf + LWS_PRE + pss->len, in, len);
		pss->len += len;
		if (pss->len > QUEUE_HIGH && !pss->flow_off) {
			lws_rx_flow_control(wsi, 0);
			pss->flow_off = 1;
			flow_offs++;
		}
		lws_callback_on_writable(wsi);
		break;

	case LWS_CALLBACK_RAW_WRITEABLE:
		if (!pss->len)
			break;
		/* lws buffers what the kernel does not take and reports the
		 * whole length written; a short count is handled anyway */
		n = lws_write(wsi, pss->buf + LWS_PRE, pss->len, LWS_WRITE_RAW);
		if (n < 0)
			return -1;
		if ((size_t)n < pss->len) {
			memmove(pss->buf + LWS_PRE, pss->buf + LWS_PRE + n,
				pss->len - (size_t)n);
			pss->len -= (size_t)n;
			lws_callback_on_writable(wsi);
			break;
		}
		pss->len = 0;
		free(pss->buf);
		pss->buf = NULL;
		pss->cap = 0;
		if (pss->flow_off) {
			lws_rx_flow_control(wsi, 1);
			pss->flow_off = 0;
		}
		break;

	case LWS_CALLBACK_RAW_CLOSE:
		free(pss->buf);
		pss->buf = NULL;
		open_conns--;
		note_open_count();
		break;

	case LWS_CALLBACK_EVENT_WAIT_CANCELLED: {
		/* lws itself also cancels its wait (after every adopt,
		 * lib/core-net/adopt.c), so not every callback answers a
		 * waker call: count those that find one pending, and how long
		 * after the first unanswered call they ran.  Calls that arrive
		 * between two callbacks coalesce (lws reads the eventfd once).
		 */
		double since = atomic_exchange(&wake_pending_since, 0.0);

		cancelled_seen++;
		if (since > 0) {
			double t = now_mono(), lat = t - since;

			wakes_answered++;
			wake_latency_sum += lat;
			if (lat > wake_latency_max) {
				wake_latency_max = lat;
				wake_latency_max_at = t;
			}
		}

		if (!atomic_load(&stop_requested) || destroy_started ||
		    destroy_scheduled)
			break;
		if (destroy_kind == DESTROY_SUL) {
			/* lws_sul_schedule() from a callback: the event lib's
			 * timer is rearmed from the idle pass after this
			 * callback returns */
			fprintf(stderr, "stop: EVENT_WAIT_CANCELLED "
				"schedules the destroy sul\n");
			destroy_scheduled = 1;
			lws_sul_schedule(context, 0, &destroy_sul,
					 destroy_from_sul, 1);
		} else if (destroy_kind == DESTROY_CANCELLED)
			start_destroy("EVENT_WAIT_CANCELLED");
		break;
	}

	case LWS_CALLBACK_PROTOCOL_DESTROY:
		protocol_destroyed = 1;
		break;

	default:
		break;
	}

	return 0;
}

static const struct lws_protocols protocols[] = {
	{ "echo", callback_echo, sizeof(struct pss), 0, 0, NULL, 0 },
	{ NULL, NULL, 0, 0, 0, NULL, 0 }
};

/* ------------------------------------------------------------------------
 * Cross-thread wake-ups and the stop signal.
 *
 * The signal handler writes one byte to sig_pipe.  The waker thread sleeps
 * in poll() on that pipe for wake_ms at a time; on each timeout it calls
 * lws_cancel_service() (the one lws call allowed from another thread).
 * When the pipe is readable it sets stop_requested, wakes the service thread
 * a last time and exits.  The service thread joins it before the context is
 * destroyed, so no lws_cancel_service() can run on a context being freed
 * (lws_cancel_service() reads context->pt[].pipe_wsi without a lock,
 * lib/core-net/vhost.c).
 */

static void
on_signal(int sig)
{
	char c = (char)sig;
	int saved = errno;

	if (write(sig_pipe[1], &c, 1) < 0) {
		/* nothing useful to do in a handler */
	}
	errno = saved;
}

static void *
waker_main(void *arg)
{
	struct pollfd p = { .fd = sig_pipe[0], .events = POLLIN };

	(void)arg;
	for (;;) {
		int n = poll(&p, 1, wake_ms > 0 ? wake_ms : -1);

		if (n > 0) {
			atomic_store(&stop_requested, 1);
			lws_cancel_service(context);
			return NULL;
		}
		if (n == 0) {
			double zero = 0.0;

			/* remember the first call not answered yet */
			atomic_compare_exchange_strong(&wake_pending_since,
						       &zero, now_mono());
			atomic_fetch_add(&wakes_sent, 1);
			lws_cancel_service(context);
		}
	}
}

static void
join_waker(void)
{
	if (!waker_running)
		return;
	pthread_join(waker, NULL);
	waker_running = 0;
}

/* lws_context_destroy() from the service thread, with the waker gone */
static void
start_destroy(const char *where)
{
	join_waker();
	destroy_started = 1;
	fprintf(stderr, "stop: lws_context_destroy() from %s\n", where);
	lws_context_destroy(context);
}

/* ------------------------------------------------------------------------
 * Loop drivers.  Each runs until destroy_started, then finishes the destroy
 * the way its event library needs, with every wait bounded.
 */

#define DRAIN_SECONDS 10.0

static void
uv_walk_print(uv_handle_t *h, void *arg)
{
	(void)arg;
	fprintf(stderr, "stop:   uv handle left: %s active=%d closing=%d\n",
		uv_handle_type_name(uv_handle_get_type(h)), uv_is_active(h),
		uv_is_closing(h));
}

static void
check_stop_outside(void)
{
	if (!destroy_started && atomic_load(&stop_requested) &&
	    destroy_kind == DESTROY_OUTSIDE)
		start_destroy("the program's loop, between iterations");
}

static int
run_poll(void)
{
	double deadline;

	/* lws_service()'s timeout is ignored in 4.1: it sleeps in poll()
	 * until an fd, a sul or lws_cancel_service() wakes it */
	while (!destroy_started) {
		lws_service(context, 0);
		check_stop_outside();
	}

	/* A destroy requested from inside lws_service() is deferred
	 * (pt->destroy_self) and completed by a later lws_service() pass up to
	 * lws_context_destroy2(), which bails out "inside service"
	 * (lib/core/context.c); a last call from here frees the context. */
	deadline = now_mono() + DRAIN_SECONDS;
	while (context && !protocol_destroyed && now_mono() < deadline)
		lws_service(context, 0);
	if (context) {
		fprintf(stderr, "stop: lws_context_destroy() again, "
			"outside lws_service()\n");
		lws_context_destroy(context);
	}
	fprintf(stderr, "stop: context %s\n", context ? "NOT freed" : "freed");
	return context ? 1 : 0;
}

static int
run_uv(void)
{
	double deadline;
	int r, alive = 0;

	while (!destroy_started) {
		uv_run(&uv_loop, UV_RUN_ONCE);
		check_stop_outside();
	}

	/* lws closes its uv handles asynchronously: keep the loop running
	 * until none is left.  NOWAIT + a short sleep keeps this bounded
	 * even if lws forgot one. */
	deadline = now_mono() + DRAIN_SECONDS;
	while ((alive = uv_run(&uv_loop, UV_RUN_NOWAIT)) &&
	       now_mono() < deadline)
		usleep(1000);
	fprintf(stderr, "stop: uv_run(NOWAIT) drain returned %d, "
		"context %s\n", alive, context ? "still allocated" : "freed");

	/* With a foreign loop lws 4.1 never calls lws_context_destroy2()
	 * itself once its handles are closed (lws_uv_close_cb_sa skips it for
	 * foreign loops, lib/event-libs/libuv/libuv.c): the second call does
	 * destroy2 + destroy3 and frees the context. */
	if (context) {
		fprintf(stderr, "stop: lws_context_destroy() again, "
			"outside the loop\n");
		lws_context_destroy(context);
	}
	fprintf(stderr, "stop: context %s\n", context ? "NOT freed" : "freed");

	r = uv_loop_close(&uv_loop);
	fprintf(stderr, "stop: uv_loop_close() returned %d%s%s\n", r,
		r ? " " : " (all handles closed)", r ? uv_err_name(r) : "");
	if (r)
		uv_walk(&uv_loop, uv_walk_print, NULL);
	return (r || context) ? 1 : 0;
}

static int
run_ev(void)
{
	double deadline;
	int alive;

	while (!destroy_started) {
		ev_run(ev_loop_p, EVRUN_ONCE);
		check_stop_outside();
	}

	/* with libev lws closes synchronously; a destroy requested from inside
	 * a callback completes on the next idle or I/O callback */
	deadline = now_mono() + DRAIN_SECONDS;
	while (context && now_mono() < deadline)
		ev_run(ev_loop_p, EVRUN_NOWAIT);
	if (context) {
		fprintf(stderr, "stop: lws_context_destroy() again, "
			"outside the loop\n");
		lws_context_destroy(context);
	}
	fprintf(stderr, "stop: context %s\n", context ? "NOT freed" : "freed");

	/* ev_run() returns nonzero while active watchers remain */
	alive = ev_run(ev_loop_p, EVRUN_NOWAIT);
	fprintf(stderr, "stop: ev_run(NOWAIT) afterwards returned %d%s\n",
		alive, alive ? " (watchers left active)" :
			       " (no active watchers)");
	ev_loop_destroy(ev_loop_p);
	return (alive || context) ? 1 : 0;
}

/* ------------------------------------------------------------------------ */

static void
usage(void)
{
	fprintf(stderr, "usage: evloop-server --port P [--loop poll|uv|ev] "
		"[--fd-table T] [--wake-ms MS] "
		"[--destroy sul|cancelled|outside]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	struct lws_context_creation_info info;
	struct rlimit rl, rl_saved;
	struct sigaction sa;
	void *foreign[1];
	rlim_t fd_table = 16384;
	int port = 0, i, r;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!v)
			usage();
		if (!strcmp(a, "--port"))
			port = atoi(v);
		else if (!strcmp(a, "--loop")) {
			if (!strcmp(v, "poll"))
				loop_kind = LOOP_POLL;
			else if (!strcmp(v, "uv"))
				loop_kind = LOOP_UV;
			else if (!strcmp(v, "ev"))
				loop_kind = LOOP_EV;
			else
				usage();
		} else if (!strcmp(a, "--fd-table"))
			fd_table = (rlim_t)atol(v);
		else if (!strcmp(a, "--wake-ms"))
			wake_ms = atoi(v);
		else if (!strcmp(a, "--destroy")) {
			if (!strcmp(v, "sul"))
				destroy_kind = DESTROY_SUL;
			else if (!strcmp(v, "cancelled"))
				destroy_kind = DESTROY_CANCELLED;
			else if (!strcmp(v, "outside"))
				destroy_kind = DESTROY_OUTSIDE;
			else
				usage();
		} else
			usage();
		i++;
	}
	if (port <= 0)
		usage();

	signal(SIGPIPE, SIG_IGN);
	if (pipe(sig_pipe)) {
		perror("pipe");
		return 1;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	/* ERR and WARN only: the ev plugin logs every I/O change at NOTICE */
	lws_set_log_level(LLL_ERR | LLL_WARN, NULL);

	memset(&info, 0, sizeof(info));
	info.port = port;
	info.iface = "127.0.0.1";
	info.protocols = protocols;
	info.options = LWS_SERVER_OPTION_ADOPT_APPLY_LISTEN_ACCEPT_CONFIG;
	info.listen_accept_role = "raw-skt";
	info.listen_accept_protocol = "echo";
	info.pcontext = &context;

	switch (loop_kind) {
	case LOOP_POLL:
		break;
	case LOOP_UV:
		if (uv_loop_init(&uv_loop)) {
			fprintf(stderr, "uv_loop_init failed\n");
			return 1;
		}
		foreign[0] = &uv_loop;
		info.foreign_loops = foreign;
		info.options |= LWS_SERVER_OPTION_LIBUV;
		break;
	case LOOP_EV:
		ev_loop_p = ev_loop_new(EVFLAG_AUTO);
		if (!ev_loop_p) {
			fprintf(stderr, "ev_loop_new failed\n");
			return 1;
		}
		foreign[0] = ev_loop_p;
		info.foreign_loops = foreign;
		info.options |= LWS_SERVER_OPTION_LIBEV;
		break;
	}

	/* lws sizes its fd table (context->max_fds, the lws_lookup array and
	 * the pollfd array) from sysconf(_SC_OPEN_MAX), i.e. the soft limit,
	 * when fd_limit_per_thread is 0 (lib/core/context.c): lower the soft
	 * limit for this call only. */
	getrlimit(RLIMIT_NOFILE, &rl_saved);
	if (fd_table > rl_saved.rlim_max)
		fd_table = rl_saved.rlim_max;
	rl = rl_saved;
	rl.rlim_cur = fd_table;
	if (setrlimit(RLIMIT_NOFILE, &rl))
		perror("setrlimit(table)");

	/* info.pcontext is only written when the context is freed (NULL) */
	context = lws_create_context(&info);

	rl.rlim_cur = rl_saved.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl))
		perror("setrlimit(hard)");
	if (!context) {
		fprintf(stderr, "lws_create_context failed\n");
		return 1;
	}
	getrlimit(RLIMIT_NOFILE, &rl);
	fprintf(stderr, "fd table: soft limit %lu during lws_create_context, "
		"now %lu (hard %lu)\n", (unsigned long)fd_table,
		(unsigned long)rl.rlim_cur, (unsigned long)rl.rlim_max);

	if (pthread_create(&waker, NULL, waker_main, NULL)) {
		fprintf(stderr, "pthread_create failed\n");
		return 1;
	}
	waker_running = 1;

	fprintf(stderr, "ready t=%.6f pid=%d loop=%s port=%d wake-ms=%d\n",
		now_mono(), (int)getpid(), loop_names[loop_kind], port,
		wake_ms);

	switch (loop_kind) {
	case LOOP_POLL:
		r = run_poll();
		break;
	case LOOP_UV:
		r = run_uv();
		break;
	default:
		r = run_ev();
		break;
	}
	join_waker();

	fprintf(stderr, "stop: waker calls %ld, answered by %ld "
		"EVENT_WAIT_CANCELLED (of %ld received), latency avg %.3f ms, "
		"max %.3f ms (at t=%.6f)\n", atomic_load(&wakes_sent),
		wakes_answered, cancelled_seen,
		wakes_answered ? wake_latency_sum * 1000.0 / wakes_answered : 0,
		wake_latency_max * 1000.0, wake_latency_max_at);
	fprintf(stderr, "stop: rx flow control engaged %ld times\n", flow_offs);
	fprintf(stderr, "stop: exit %d\n", r);
	return r;
}
