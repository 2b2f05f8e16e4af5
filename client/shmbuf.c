/* shmbuf.c — unique POSIX shared-memory segments for host buffers. */
#include "client/shmbuf.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The library's only global state: a counter that makes names unique within
 * the process (pid + counter), the random part keeps a stale segment of a
 * previous process with the same pid from colliding. */
static pthread_mutex_t counter_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t counter;

static uint64_t next_counter(void)
{
    pthread_mutex_lock(&counter_mu);
    uint64_t v = ++counter;
    pthread_mutex_unlock(&counter_mu);
    return v;
}

static uint32_t random32(void)
{
    uint32_t r;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) == (ssize_t)sizeof r)
        return r;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint32_t)ts.tv_nsec ^ (uint32_t)ts.tv_sec * 2654435761u;
}

int pj_shmbuf_create(pj_shmbuf *b, size_t size, char *err, size_t errlen)
{
    memset(b, 0, sizeof *b);
    if (size == 0 || size > (size_t)INT64_MAX) {
        snprintf(err, errlen, "shm buffer: size %zu must be in 1..2^63", size);
        return -EINVAL;
    }
    int fd = -1, e;
    for (int attempt = 0; attempt < 8; attempt++) {
        snprintf(b->name, sizeof b->name, "/projd-%ld-%llu-%08x", (long)getpid(),
                 (unsigned long long)next_counter(), random32());
        fd = shm_open(b->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            break;
    }
    if (fd < 0) {
        e = errno;
        snprintf(err, errlen, "shm buffer %s: shm_open: %s", b->name, strerror(e));
        memset(b, 0, sizeof *b);
        return -e;
    }
    if (ftruncate(fd, (off_t)size) != 0) {
        e = errno;
        snprintf(err, errlen, "shm buffer %s: ftruncate to %zu bytes: %s", b->name, size,
                 strerror(e));
        goto fail;
    }
    /* ftruncate leaves the object sparse: on a /dev/shm smaller than size
     * (a container's default is 64 MiB) the first store to a page tmpfs
     * cannot back kills the process with SIGBUS. Reserving every page now
     * turns that into an error here. */
    do
        e = posix_fallocate(fd, 0, (off_t)size);
    while (e == EINTR); /* tmpfs gives up on a pending signal; nothing is wrong */
    if (e != 0) {
        snprintf(err, errlen, "shm buffer %s: reserving %zu bytes in /dev/shm: %s", b->name, size,
                 strerror(e));
        goto fail;
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        e = errno;
        snprintf(err, errlen, "shm buffer %s: mmap of %zu bytes: %s", b->name, size, strerror(e));
        goto fail;
    }
    close(fd);
    b->ptr = p;
    b->size = size;
    b->linked = 1;
    return 0;
fail:
    close(fd);
    shm_unlink(b->name);
    memset(b, 0, sizeof *b);
    return -e;
}

int pj_shmbuf_unlink(pj_shmbuf *b)
{
    if (!b->linked)
        return 0;
    b->linked = 0;
    return shm_unlink(b->name) == 0 ? 0 : -errno;
}

void pj_shmbuf_destroy(pj_shmbuf *b)
{
    if (b->ptr)
        munmap(b->ptr, b->size);
    pj_shmbuf_unlink(b);
    memset(b, 0, sizeof *b);
}
