#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include "cthreads.h"

void tabd_name_this_thread(const char *name) {
    char cut[16];
    strncpy(cut, name, 15);
    cut[15] = 0;
    pthread_setname_np(pthread_self(), cut);
}
