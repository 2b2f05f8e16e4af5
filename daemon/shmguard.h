/* shmguard.h — survive a client that shrinks a shared-memory object we map.
 *
 * The owner of a POSIX shm object may ftruncate it after registering it;
 * touching the mapping past the new end raises SIGBUS, which would kill the
 * daemon. Guarded ranges are kept in a fixed table that the SIGBUS handler
 * reads without locks: a fault inside a guarded range is absorbed by mapping
 * private zero pages over the whole range (the access then completes and
 * reads zeros or writes to memory nobody sees; later accesses do not fault)
 * and the range is marked faulted, so the request that touched it is
 * answered with an error and the buffer refuses later use. A fault
 * anywhere else, and a SIGBUS another process sent (kill -BUS), gets the
 * previous handler (normally: the process dies as it would have).
 */
#ifndef PJ_SHMGUARD_H
#define PJ_SHMGUARD_H

#include <stddef.h>

/* Install the process-wide SIGBUS handler (idempotent). 0 or -errno. */
int pj_shmguard_install(void);

/* Guard [base, base + len). Returns a slot >= 0, or -ENOSPC when the table
 * (PJ_SHMGUARD_SLOTS ranges) is full. */
#define PJ_SHMGUARD_SLOTS 8192

/* What a fault in a guarded range may mean, for messages that follow
 * "shrank ...": a read of a page the object never had faults the same way
 * when its filesystem is full or a memory limit refuses the page, and the
 * guard cannot tell the two apart. */
#define PJ_SHMGUARD_OR_NO_PAGE ", or /dev/shm (full, or a memory limit) had no page for it"
int pj_shmguard_add(void *base, size_t len);

/* Stop guarding (before the range is unmapped). slot < 0 is ignored. */
void pj_shmguard_remove(int slot);

/* 1 once a fault in the slot's range was absorbed. */
int pj_shmguard_faulted(int slot);

/* Faults absorbed since start (all slots). */
unsigned long pj_shmguard_total_faults(void);

#endif
