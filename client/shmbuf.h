/* shmbuf.h — a POSIX shared-memory segment the client owns and maps.
 *
 * libprojd creates one per host buffer and hands its name to the daemon,
 * which maps the same pages; no daemon is involved here.
 */
#ifndef PJ_SHMBUF_H
#define PJ_SHMBUF_H

#include <stddef.h>

#define PJ_SHMBUF_NAME_MAX 64

typedef struct pj_shmbuf {
    char name[PJ_SHMBUF_NAME_MAX]; /* "/projd-<pid>-<counter>-<random>" */
    void *ptr;                     /* mapping, size bytes, zero-filled */
    size_t size;
    int linked; /* the name still exists in /dev/shm */
} pj_shmbuf;

/* Creates a new segment with a unique name (mode 0600, O_EXCL), sizes it,
 * reserves its pages (a /dev/shm too small for size is -ENOSPC here, not a
 * SIGBUS at the first store) and maps it read-write. Returns 0, or a
 * negative errno with a message in err (nothing is left behind on failure).
 * size must be > 0. */
int pj_shmbuf_create(pj_shmbuf *b, size_t size, char *err, size_t errlen);

/* Removes the name (the mapping stays valid). 0 or a negative errno. */
int pj_shmbuf_unlink(pj_shmbuf *b);

/* Unmaps, unlinks the name if still there, and clears *b. */
void pj_shmbuf_destroy(pj_shmbuf *b);

#endif
