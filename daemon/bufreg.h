/* bufreg.h — one connection's registered buffers.
 *
 * Owned by the connection and used from the loop thread only, except the
 * release itself (backend buffer_close, unmap, the totals), which runs on
 * the closer's thread (daemon/closer.h) once no request uses the buffer
 * and the backend says the device is done with it. A buffer is
 * host shared memory (mapped here, then handed to the backend) or a CUDA IPC
 * allocation (handed to the backend as is). Ids start at 1 and are never
 * reused within a registry, so a stale id always misses. Requests take a
 * reference on each buffer they use when they are accepted; UNREGISTER
 * removes the id at once (later lookups fail) but the mapping is released
 * only when the last reference is dropped.
 */
#ifndef PJ_BUFREG_H
#define PJ_BUFREG_H

#include <stdint.h>

#include "daemon/backend.h"
#include "protocol/wire.h"

typedef struct pj_buf {
    uint32_t id;
    uint8_t kind;     /* PJ_BUF_SHM / PJ_BUF_CUDA */
    uint64_t size;    /* registered bytes */
    void *map;        /* PJ_BUF_SHM: our mapping (size bytes) */
    void *addr;       /* address for byte 0, from the backend */
    void *handle;     /* the backend's, for buffer_close */
    int guard;        /* shmguard slot, -1 when none */
    uint32_t refs;    /* requests in flight that use it */
    int unregistered; /* id removed; freed when refs drops to 0 */
    pj_backend *be;   /* retiring: the backend to close it on */
    struct pj_buf *next_retiring;
    char name[PJ_WIRE_SHM_NAME_MAX + 1];
    /* What a RETRY of the REGISTER that made it is matched by
     * (pj_bufreg_register_req): that REGISTER's req_id, and for PJ_BUF_SHM
     * the object's identity when it was mapped, for PJ_BUF_CUDA the handle
     * and device as registered. */
    uint64_t reg_req_id;
    int reg_retry; /* made by a RETRY (whose first REGISTER may come after) */
    uint64_t shm_dev, shm_ino;
    uint8_t ipc_handle[PJ_WIRE_IPC_HANDLE_SIZE];
    uint8_t device_uuid[PJ_WIRE_UUID_SIZE];
} pj_buf;

typedef struct pj_bufreg {
    pj_backend *be; /* may be NULL (tests): buffers are then only mapped */
    uint32_t peer_uid;
    int32_t peer_pid;
    pj_buf **live; /* registered, sorted by id */
    uint32_t n_live, cap;
    uint32_t next_id;
    uint32_t n_held;     /* live + unregistered but still referenced */
    uint64_t held_bytes; /* registered bytes of the n_held buffers */
} pj_bufreg;

/* What one REGISTER may add (config limits.*). A sparse shm object costs the
 * client nothing, but every byte registered is daemon address space (and
 * pinned memory for the cuda backend), so sizes are capped per buffer, per
 * connection and for the whole daemon. UINT64_MAX = no cap. */
typedef struct pj_bufreg_limits {
    uint32_t max_buffers;      /* live buffers on the connection */
    uint64_t max_buffer_bytes; /* one buffer */
    uint64_t max_conn_bytes;   /* held by the connection, this one included */
    uint64_t max_total_bytes;  /* held by every connection of the daemon */
} pj_bufreg_limits;

/* Open the POSIX shm object `name`, check that it is a regular object owned
 * by peer_uid (any owner when peer_uid is 0), that it has at least size
 * bytes and, with private_only, that no other user may open it (mode
 * 0600); then map size bytes shared. PJ_OK with *map set, or
 * PJ_E_REGISTER with err starting "<what> <name>: ". */
int pj_shm_map_checked(const char *what, const char *name, uint64_t size, uint32_t peer_uid,
                       int private_only, void **map, char *err, size_t errlen);

/* Empty registry for a peer. */
void pj_bufreg_init(pj_bufreg *r, pj_backend *be, uint32_t peer_uid, int32_t peer_pid);

/* Map/open the buffer the request names and give it an id. Returns a
 * pj_status: PJ_E_LIMIT (max_buffers live already), PJ_E_REGISTER (cannot
 * open, not owned by the peer, too small, backend refused), PJ_E_INTERNAL.
 * Each REGISTER is its own registration (a client may hold one buffer
 * under several ids and release them apart). */
int pj_bufreg_register(pj_bufreg *r, const pj_register *req, uint32_t max_buffers, pj_buf **out,
                       char *err, size_t errlen);

/* The same under byte limits too (PJ_E_LIMIT, with a message naming the
 * limit and the numbers, when the buffer would pass any of them; nothing
 * is opened or mapped then), for the REGISTER with req_id. retry (its
 * header's RETRY flag):
 * it repeats the REGISTER with that req_id, whose reply the client did not
 * get; when that one registered this very buffer (the same shm object, by
 * its identity, not only its name; or the same CUDA IPC handle and device;
 * the same size) and it is still live, the answer is that registration
 * and nothing is opened. Otherwise (the first failed, or named something
 * else) it registers as any REGISTER does. The two may be handled in
 * either order (the connection's contexts hand requests to the loop from
 * nng's threads), so a REGISTER that finds a registration its own RETRY
 * made is answered with it too. So a REGISTER that timed out after the
 * daemon mapped the buffer costs no second mapping that nothing can name
 * until the client disconnects. */
int pj_bufreg_register_req(pj_bufreg *r, const pj_register *req, const pj_bufreg_limits *lim,
                           uint64_t req_id, int retry, pj_buf **out, char *err, size_t errlen);

/* The live buffer with this id, or NULL (unknown, unregistered). */
pj_buf *pj_bufreg_get(pj_bufreg *r, uint32_t id);

/* Remove an id. PJ_OK or PJ_E_BUFFER (unknown id). The mapping goes when
 * the last reference does. */
int pj_bufreg_unregister(pj_bufreg *r, uint32_t id, char *err, size_t errlen);

void pj_bufreg_ref(pj_buf *b);
/* Drop a reference; frees an unregistered buffer at zero. */
void pj_bufreg_unref(pj_bufreg *r, pj_buf *b);

/* Unregister everything (connection gone). Buffers still referenced are
 * freed by their last unref; the caller makes sure that happens. */
void pj_bufreg_clear(pj_bufreg *r);

/* 1 when the buffer's shared memory shrank under a request (it is broken). */
int pj_buf_faulted(const pj_buf *b);

/* For a shared-memory buffer: reads the byte at off + len - 1 of the
 * daemon's mapping under the SIGBUS guard, so that an object the client
 * shrank below that byte marks the buffer faulted (the cuda backend copies
 * through pinned pages the daemon's CPU never touches, and would not
 * notice). Then pj_buf_faulted. len >= 1, the span inside b->size (the
 * validated op's). A CUDA IPC buffer: 0. Loop thread. */
int pj_buf_probe(pj_buf *b, uint64_t off, uint64_t len);

/* Process-wide totals: buffers held (by connections, or retiring) and
 * bytes mapped (those too, and buffers whose release has not returned). */
void pj_bufreg_totals(uint64_t *buffers, uint64_t *bytes);

/* Process-wide registered bytes of every buffer held (shm and CUDA IPC),
 * releases not yet returned included: what limits.max_total_buffer_bytes
 * caps. */
uint64_t pj_bufreg_total_held_bytes(void);

/* Buffers released by their connection (unregistered, or the connection
 * closed) while the device may still use them (backend buffer_busy): they
 * stay mapped and counted, and are handed to the closer (daemon/closer.h)
 * once the backend says they are idle. wait: hand over every one now (the
 * closer's buffer_close then waits for the device, bounded), for shutdown.
 * Returns how many are still retiring. Loop thread. */
size_t pj_bufreg_reap(int wait);

#endif
