#ifndef TABD_CSIGNALS_H
#define TABD_CSIGNALS_H

/// Catches `signals` from this call on: each one received is written, as one byte, to a
/// pipe by a handler that does nothing else (write(2) is async-signal-safe). Nothing is
/// lost between this call and the first read, whichever thread the kernel picks (the main
/// thread parked in dispatch_main unblocks every signal). Call it once, as early as the
/// process can. Returns 0, or -1 with errno set.
int tabd_signals_catch(const int *signals, int count);

/// Blocks until a caught signal arrives; returns its number, or -1 if the pipe failed.
int tabd_signals_next(void);

#endif
