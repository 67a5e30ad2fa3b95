#ifndef TABD_CSQLITE_SHIM_H
#define TABD_CSQLITE_SHIM_H

#include <sqlite3.h>

/// SQLITE_TRANSIENT is a cast macro that does not import into Swift: "copy the bytes now".
static inline sqlite3_destructor_type tabd_sqlite_transient(void) { return SQLITE_TRANSIENT; }

#endif
