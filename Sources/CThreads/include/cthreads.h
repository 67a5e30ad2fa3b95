#ifndef TABD_CTHREADS_H
#define TABD_CTHREADS_H
/// Names the calling thread (the first 15 bytes, as Linux keeps them): what `top -H` and a
/// debugger show. pthread_setname_np is a GNU extension Swift's Glibc does not show.
void tabd_name_this_thread(const char *name);
#endif
