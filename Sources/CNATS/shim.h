#ifndef TABD_CNATS_SHIM_H
#define TABD_CNATS_SHIM_H

// Debian's NATS C client (libnats-dev): JetStream streams, compare-and-set publishes and
// ordered consumers for tabd's cluster mode. Seen only by the JetStream module.
#include <nats/nats.h>

#endif
