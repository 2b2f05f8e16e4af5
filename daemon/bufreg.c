/* bufreg.c — see bufreg.h. */
#include "daemon/bufreg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/closer.h"
#include "daemon/shmguard.h"

/* Added on the loop; the bytes are taken off by whichever thread releases
 * the buffer (closer.h), once its mapping is gone. */
static atomic_uint_fast64_t g_buffers, g_bytes, g_held_bytes;

uint64_t pj_bufreg_total_held_bytes(void)
{
    return atomic_load(&g_held_bytes);
}

void pj_bufreg_totals(uint64_t *buffers, uint64_t *bytes)
{
    *buffers = atomic_load(&g_buffers);
    *bytes = atomic_load(&g_bytes);
}

void pj_bufreg_init(pj_bufreg *r, pj_backend *be, uint32_t peer_uid, int32_t peer_pid)
{
    memset(r, 0, sizeof *r);
    r->be = be;
    r->peer_uid = peer_uid;
    r->peer_pid = peer_pid;
    r->next_id = 1;
}

static pj_buf *g_retiring;
static size_t g_n_retiring;

/* Close on the backend, unmap, uncount, free: on the closer's thread,
 * since buffer_close may wait for the device (closer.h). The unmap comes
 * after the close, so the range stays ours while the backend has it. */
static void buf_release_now(void *arg)
{
    pj_buf *b = arg;
    if (b->handle && b->be)
        b->be->ops->buffer_close(b->be, b->handle);
    pj_shmguard_remove(b->guard);
    if (b->map) {
        munmap(b->map, (size_t)b->size);
        atomic_fetch_sub(&g_bytes, b->size);
    }
    atomic_fetch_sub(&g_held_bytes, b->size);
    free(b);
}

/* The buffer stops counting as one the moment it is handed over (STATS
 * buffers.current: what clients hold, and what UNREGISTER takes back at
 * once); its bytes count until the release has returned. */
static void buf_release(pj_buf *b, pj_backend *be)
{
    b->be = be;
    atomic_fetch_sub(&g_buffers, 1);
    pj_closer_run(buf_release_now, b);
}

static int buf_busy(const pj_buf *b, pj_backend *be)
{
    return b->handle && be && be->ops->buffer_busy && be->ops->buffer_busy(be, b->handle);
}

/* The connection is done with b. Work answered at launch may still use it
 * on the device: then it retires (pj_bufreg_reap) instead of making the
 * loop wait in buffer_close. */
static void buf_free(pj_bufreg *r, pj_buf *b)
{
    r->n_held--;
    r->held_bytes -= b->size;
    if (buf_busy(b, r->be)) {
        b->be = r->be;
        b->next_retiring = g_retiring;
        g_retiring = b;
        g_n_retiring++;
        return;
    }
    buf_release(b, r->be);
}

size_t pj_bufreg_reap(int wait)
{
    for (pj_buf **pp = &g_retiring; *pp;) {
        pj_buf *b = *pp;
        if (wait || !buf_busy(b, b->be)) {
            *pp = b->next_retiring;
            g_n_retiring--;
            buf_release(b, b->be);
        } else {
            pp = &b->next_retiring;
        }
    }
    return g_n_retiring;
}

/* A POSIX shm name: "/" then 1..254 characters, none of them '/'. */
static int shm_name_ok(const char *name)
{
    size_t len = strnlen(name, PJ_WIRE_SHM_NAME_MAX + 1);
    return len >= 2 && len <= PJ_WIRE_SHM_NAME_MAX && name[0] == '/' && !strchr(name + 1, '/');
}

/* pj_shm_map_checked, and the identity (device, inode) of the object it
 * mapped, from the same descriptor's fstat (dev, ino may be NULL). */
static int map_checked_id(const char *what, const char *name, uint64_t size, uint32_t peer_uid,
                          int private_only, void **map, uint64_t *dev, uint64_t *ino, char *err,
                          size_t errlen);

int pj_shm_map_checked(const char *what, const char *name, uint64_t size, uint32_t peer_uid,
                       int private_only, void **map, char *err, size_t errlen)
{
    return map_checked_id(what, name, size, peer_uid, private_only, map, NULL, NULL, err, errlen);
}

static int map_checked_id(const char *what, const char *name, uint64_t size, uint32_t peer_uid,
                          int private_only, void **map, uint64_t *dev, uint64_t *ino, char *err,
                          size_t errlen)
{
    /* glibc's shm_open adds O_NOFOLLOW and O_CLOEXEC. O_NONBLOCK: the
     * owner may hold a read lease on its object (F_SETLEASE), and a
     * blocking open for writing would wait for the lease's break, up to
     * fs.lease-break-time (45 s), with the whole loop behind it; it does
     * not change the mapping. */
    int fd = shm_open(name, O_RDWR | O_NONBLOCK, 0);
    if (fd < 0 && errno == EWOULDBLOCK) {
        snprintf(err, errlen,
                 "%s %s: the object has a file lease (F_SETLEASE) that an open for writing "
                 "would have to break: not mapped; release the lease first",
                 what, name);
        return PJ_E_REGISTER;
    }
    if (fd < 0) {
        snprintf(err, errlen, "%s %s: shm_open: %s", what, name, strerror(errno));
        return PJ_E_REGISTER;
    }
    struct stat st;
    int status = PJ_OK;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s %s: fstat: %s", what, name, strerror(errno));
        status = PJ_E_REGISTER;
    } else if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s %s: not a shared memory object", what, name);
        status = PJ_E_REGISTER;
    } else if (peer_uid != 0 && st.st_uid != peer_uid) {
        /* A root daemon must not become a way to reach other users' memory. */
        snprintf(err, errlen, "%s %s: owned by uid %u, not by the client (uid %u)", what, name,
                 (unsigned)st.st_uid, (unsigned)peer_uid);
        status = PJ_E_REGISTER;
    } else if (private_only && (st.st_mode & 077) != 0) {
        /* Any bit for group or others is refused, read bits too: a reader
         * sees the client's data. Saying "write" for 0644 was wrong. */
        snprintf(err, errlen, "%s %s: mode %03o lets other users open it; it must be 0600", what,
                 name, (unsigned)(st.st_mode & 0777));
        status = PJ_E_REGISTER;
    } else if ((uint64_t)st.st_size < size) {
        snprintf(err, errlen, "%s %s: object has %lld bytes, %llu needed", what, name,
                 (long long)st.st_size, (unsigned long long)size);
        status = PJ_E_REGISTER;
    } else {
        void *p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            snprintf(err, errlen, "%s %s: mmap of %llu bytes: %s", what, name,
                     (unsigned long long)size, strerror(errno));
            status = PJ_E_REGISTER;
        } else {
            *map = p;
            if (dev)
                *dev = (uint64_t)st.st_dev;
            if (ino)
                *ino = (uint64_t)st.st_ino;
        }
    }
    close(fd);
    return status;
}

static int map_shm(pj_bufreg *r, const pj_register *req, pj_buf *b, char *err, size_t errlen)
{
    if (!shm_name_ok(req->shm_name)) {
        snprintf(err, errlen, "REGISTER: shm name \"%.64s\" is not \"/name\" without other '/'",
                 req->shm_name);
        return PJ_E_REGISTER;
    }
    if (req->size == 0 || req->size > (uint64_t)SIZE_MAX / 2) {
        snprintf(err, errlen, "REGISTER %s: size %llu is not usable", req->shm_name,
                 (unsigned long long)req->size);
        return PJ_E_REGISTER;
    }
    /* The identity of the object mapped, for a RETRY's match (find_retried):
     * from the mapped descriptor, so an object swapped under the name
     * meanwhile cannot be recorded in its place. */
    int status = map_checked_id("REGISTER", req->shm_name, req->size, r->peer_uid, 0, &b->map,
                                &b->shm_dev, &b->shm_ino, err, errlen);
    if (status != PJ_OK)
        return status;
    b->guard = pj_shmguard_add(b->map, (size_t)req->size);
    if (b->guard < 0) {
        munmap(b->map, (size_t)req->size);
        b->map = NULL;
        snprintf(err, errlen, "REGISTER %s: too many shared memory buffers in the daemon (%d)",
                 req->shm_name, PJ_SHMGUARD_SLOTS);
        return PJ_E_LIMIT;
    }
    return PJ_OK;
}

/* 1 when adding size to held would pass max (held may already be over it
 * after a reload lowered the limit). */
static int over(uint64_t held, uint64_t size, uint64_t max)
{
    return held > max || size > max - held;
}

/* The byte limits, before anything is opened or mapped. */
static int check_bytes(const pj_bufreg *r, const pj_register *req, const pj_bufreg_limits *lim,
                       char *err, size_t errlen)
{
    const char *name = req->kind == PJ_BUF_SHM ? req->shm_name : "(cuda ipc)";
    unsigned long long size = (unsigned long long)req->size;
    if (size > lim->max_buffer_bytes) {
        snprintf(err, errlen,
                 "REGISTER %.64s: %llu bytes is over limits.max_buffer_bytes (%llu per buffer)",
                 name, size, (unsigned long long)lim->max_buffer_bytes);
        return PJ_E_LIMIT;
    }
    if (over(r->held_bytes, req->size, lim->max_conn_bytes)) {
        snprintf(err, errlen,
                 "REGISTER %.64s: %llu bytes on top of the %llu this connection holds is over "
                 "limits.max_conn_buffer_bytes (%llu)",
                 name, size, (unsigned long long)r->held_bytes,
                 (unsigned long long)lim->max_conn_bytes);
        return PJ_E_LIMIT;
    }
    uint64_t total = atomic_load(&g_held_bytes);
    if (over(total, req->size, lim->max_total_bytes)) {
        snprintf(err, errlen,
                 "REGISTER %.64s: %llu bytes on top of the %llu all connections hold is over "
                 "limits.max_total_buffer_bytes (%llu)",
                 name, size, (unsigned long long)total, (unsigned long long)lim->max_total_bytes);
        return PJ_E_LIMIT;
    }
    return PJ_OK;
}

int pj_bufreg_register(pj_bufreg *r, const pj_register *req, uint32_t max_buffers, pj_buf **out,
                       char *err, size_t errlen)
{
    pj_bufreg_limits lim = {.max_buffers = max_buffers,
                            .max_buffer_bytes = UINT64_MAX,
                            .max_conn_bytes = UINT64_MAX,
                            .max_total_bytes = UINT64_MAX};
    return pj_bufreg_register_req(r, req, &lim, 0, 0, out, err, errlen);
}

/* The identity (device, inode) of the shm object name names now; 0, or
 * -1 when it cannot be opened. Read-only and non-blocking: a read lease
 * is not broken by it. */
static int shm_identity(const char *name, uint64_t *dev, uint64_t *ino)
{
    int fd = shm_open(name, O_RDONLY | O_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    struct stat st;
    int rc = fstat(fd, &st);
    close(fd);
    if (rc != 0)
        return -1;
    *dev = (uint64_t)st.st_dev;
    *ino = (uint64_t)st.st_ino;
    return 0;
}

/* The live buffer that the REGISTER with req_id or its RETRY made, when
 * req names it again, or NULL (pj_bufreg_register_req). retry: req is the
 * RETRY (any of them matches); else only one a RETRY made matches. */
static pj_buf *find_retried(const pj_bufreg *r, const pj_register *req, uint64_t req_id, int retry)
{
    uint64_t dev = 0, ino = 0;
    int have_id = -1; /* the shm object's identity, looked up once */
    for (uint32_t i = 0; i < r->n_live; i++) {
        pj_buf *b = r->live[i];
        if (b->reg_req_id != req_id || (!retry && !b->reg_retry) || b->kind != req->kind ||
            b->size != req->size)
            continue;
        if (b->kind == PJ_BUF_CUDA) {
            if (!memcmp(b->ipc_handle, req->ipc_handle, sizeof b->ipc_handle) &&
                !memcmp(b->device_uuid, req->device_uuid, sizeof b->device_uuid))
                return b;
            continue;
        }
        if (strcmp(b->name, req->shm_name) != 0)
            continue;
        /* The same name may now be another object (unlinked and made
         * again): only the one that was mapped is the same buffer. */
        if (have_id < 0)
            have_id = shm_identity(req->shm_name, &dev, &ino) == 0;
        if (have_id && b->shm_dev == dev && b->shm_ino == ino)
            return b;
    }
    return NULL;
}

int pj_bufreg_register_req(pj_bufreg *r, const pj_register *req, const pj_bufreg_limits *lim,
                           uint64_t req_id, int retry, pj_buf **out, char *err, size_t errlen)
{
    *out = NULL;
    pj_buf *same = find_retried(r, req, req_id, retry);
    if (same) {
        *out = same;
        return PJ_OK;
    }
    uint32_t max_buffers = lim->max_buffers;
    /* Held, not registered: a buffer unregistered while a request uses it
     * stays mapped until that request is done, and counted as the bytes
     * limits do, or a client could keep re-registering behind its queue. */
    if (r->n_held >= max_buffers) {
        if (r->n_held > r->n_live)
            snprintf(err, errlen,
                     "REGISTER: connection already holds %u buffers (limit %u): %u registered, %u "
                     "unregistered but still used by its requests",
                     r->n_held, max_buffers, r->n_live, r->n_held - r->n_live);
        else
            snprintf(err, errlen, "REGISTER: connection already has %u buffers (limit %u)",
                     r->n_live, max_buffers);
        return PJ_E_LIMIT;
    }
    if (r->next_id == 0) {
        snprintf(err, errlen, "REGISTER: buffer ids exhausted on this connection");
        return PJ_E_LIMIT;
    }
    if (req->kind != PJ_BUF_SHM && req->kind != PJ_BUF_CUDA) {
        snprintf(err, errlen, "REGISTER: unknown buffer kind %u", (unsigned)req->kind);
        return PJ_E_REGISTER;
    }
    int st = check_bytes(r, req, lim, err, errlen);
    if (st != PJ_OK)
        return st;
    if (r->n_live == r->cap) {
        uint32_t cap = r->cap ? r->cap * 2 : 8;
        pj_buf **live = realloc(r->live, cap * sizeof *live);
        if (!live) {
            snprintf(err, errlen, "REGISTER: out of memory");
            return PJ_E_INTERNAL;
        }
        r->live = live;
        r->cap = cap;
    }
    pj_buf *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(err, errlen, "REGISTER: out of memory");
        return PJ_E_INTERNAL;
    }
    b->kind = req->kind;
    b->size = req->size;
    b->guard = -1;
    int status = PJ_OK;
    pj_buf_desc d = {.kind = req->kind,
                     .size = req->size,
                     .ipc_handle = req->ipc_handle,
                     .device_uuid = req->device_uuid,
                     .peer_uid = r->peer_uid,
                     .peer_pid = r->peer_pid};
    if (req->kind == PJ_BUF_SHM) {
        snprintf(b->name, sizeof b->name, "%s", req->shm_name);
        status = map_shm(r, req, b, err, errlen);
        d.host = b->map;
        b->addr = b->map;
    } else {
        snprintf(b->name, sizeof b->name, "cuda-ipc");
        memcpy(b->ipc_handle, req->ipc_handle, sizeof b->ipc_handle);
        memcpy(b->device_uuid, req->device_uuid, sizeof b->device_uuid);
        if (!r->be) {
            snprintf(err, errlen, "REGISTER: CUDA IPC buffers need the cuda backend");
            status = PJ_E_REGISTER;
        }
    }
    if (status == PJ_OK && r->be) {
        status = r->be->ops->buffer_open(r->be, &d, &b->addr, &b->handle, err, errlen);
        if (status != PJ_OK)
            b->handle = NULL;
    }
    if (status != PJ_OK) {
        pj_shmguard_remove(b->guard);
        if (b->map)
            munmap(b->map, (size_t)b->size);
        free(b);
        return status;
    }
    b->id = r->next_id++;
    b->reg_req_id = req_id;
    b->reg_retry = retry;
    /* Ids only grow, so appending keeps live sorted. */
    r->live[r->n_live++] = b;
    r->n_held++;
    r->held_bytes += b->size;
    atomic_fetch_add(&g_buffers, 1);
    atomic_fetch_add(&g_held_bytes, b->size);
    if (b->map)
        atomic_fetch_add(&g_bytes, b->size);
    *out = b;
    return PJ_OK;
}

static int find_index(const pj_bufreg *r, uint32_t id)
{
    uint32_t lo = 0, hi = r->n_live;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        uint32_t v = r->live[mid]->id;
        if (v == id)
            return (int)mid;
        if (v < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

pj_buf *pj_bufreg_get(pj_bufreg *r, uint32_t id)
{
    int i = find_index(r, id);
    return i < 0 ? NULL : r->live[i];
}

static void drop_live(pj_bufreg *r, uint32_t i)
{
    pj_buf *b = r->live[i];
    memmove(&r->live[i], &r->live[i + 1], (r->n_live - i - 1) * sizeof *r->live);
    r->n_live--;
    b->unregistered = 1;
    if (b->refs == 0)
        buf_free(r, b);
}

int pj_bufreg_unregister(pj_bufreg *r, uint32_t id, char *err, size_t errlen)
{
    int i = find_index(r, id);
    if (i < 0) {
        snprintf(err, errlen, "UNREGISTER: buffer %u is not registered on this connection", id);
        return PJ_E_BUFFER;
    }
    drop_live(r, (uint32_t)i);
    return PJ_OK;
}

void pj_bufreg_ref(pj_buf *b)
{
    b->refs++;
}

void pj_bufreg_unref(pj_bufreg *r, pj_buf *b)
{
    if (--b->refs == 0 && b->unregistered)
        buf_free(r, b);
}

void pj_bufreg_clear(pj_bufreg *r)
{
    while (r->n_live)
        drop_live(r, r->n_live - 1);
    free(r->live);
    r->live = NULL;
    r->cap = 0;
}

int pj_buf_faulted(const pj_buf *b)
{
    return b->guard >= 0 && pj_shmguard_faulted(b->guard);
}

/* The byte read may be one another job of the connection is writing (a
 * request's y is often the next one's x): its value is not used, so the
 * race is not one ThreadSanitizer should report. */
__attribute__((no_sanitize("thread"))) int pj_buf_probe(pj_buf *b, uint64_t off, uint64_t len)
{
    if (b->kind != PJ_BUF_SHM || !b->map || b->guard < 0 || len == 0 || off + len > b->size)
        return pj_buf_faulted(b);
    if (!pj_shmguard_faulted(b->guard))
        (void)*(volatile const unsigned char *)((const char *)b->map + off + len - 1);
    return pj_buf_faulted(b);
}
