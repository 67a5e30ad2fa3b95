#define _GNU_SOURCE
#include "CSignals.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static int signal_pipe[2] = {-1, -1};

static void on_signal(int signo) {
    int saved = errno;
    unsigned char byte = (unsigned char)signo;
    // Non-blocking: with 64 KiB of signals unread the extra ones are dropped, never a hang.
    ssize_t ignored = write(signal_pipe[1], &byte, 1);
    (void)ignored;
    errno = saved;
}

int tabd_signals_catch(const int *signals, int count) {
    if (signal_pipe[0] != -1) { errno = EBUSY; return -1; }
    if (pipe2(signal_pipe, O_CLOEXEC) != 0) return -1;
    int flags = fcntl(signal_pipe[1], F_GETFL);
    if (flags == -1 || fcntl(signal_pipe[1], F_SETFL, flags | O_NONBLOCK) == -1) return -1;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    for (int i = 0; i < count; i++) {
        if (sigaction(signals[i], &action, NULL) != 0) return -1;
    }
    return 0;
}

int tabd_signals_next(void) {
    unsigned char byte;
    for (;;) {
        ssize_t n = read(signal_pipe[0], &byte, 1);
        if (n == 1) return byte;
        if (n < 0 && errno == EINTR) continue;
        return -1;
    }
}
