/* Growable arrays: the one doubling loop that kbox's tables, lists and
 * byte buffers grow by. */
#ifndef KBOX_LIB_GROW_H
#define KBOX_LIB_GROW_H

#include <stddef.h>

/* Make the array whose pointer is at arrp (the address of any object
 * pointer, NULL while *cap is 0) hold at least need elements of size bytes:
 * its capacity, *cap elements, doubles (from first when it is 0) until it
 * does, but never past max elements (0: no bound).  Nothing happens when
 * it holds enough already.  0, -E2BIG when need is over max or the bytes
 * would not fit a size_t, or -ENOMEM; on failure *arrp and *cap are
 * unchanged and the array is still the caller's. */
int grow_array(void *arrp, size_t *cap, size_t need, size_t size, size_t first, size_t max);

#endif
