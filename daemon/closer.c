/* closer.c — see closer.h. */
#include "daemon/closer.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct job {
    pj_closer_fn fn;
    void *arg;
    struct job *next;
} job;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;      /* work queued, or stop */
static pthread_cond_t g_idle_cv = PTHREAD_COND_INITIALIZER; /* a job finished */
static job *g_head, *g_tail;
static pthread_t g_thread;
static int g_running, g_stop;
static int g_abandoned; /* a stop gave up on the thread: start and stop do nothing */
static atomic_uint g_pending;
static atomic_uint_fast64_t g_started_ns; /* the running job's start; 0 when none runs */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *closer_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g_mu);
    for (;;) {
        while (!g_head && !g_stop)
            pthread_cond_wait(&g_cv, &g_mu);
        job *j = g_head;
        if (!j)
            break; /* stop, and nothing left */
        g_head = j->next;
        if (!g_head)
            g_tail = NULL;
        pthread_mutex_unlock(&g_mu);
        atomic_store(&g_started_ns, mono_ns());
        j->fn(j->arg);
        atomic_store(&g_started_ns, 0);
        free(j);
        pthread_mutex_lock(&g_mu);
        atomic_fetch_sub(&g_pending, 1);
        pthread_cond_broadcast(&g_idle_cv);
    }
    pthread_mutex_unlock(&g_mu);
    return NULL;
}

int pj_closer_start(char *err, size_t errlen)
{
    pthread_mutex_lock(&g_mu);
    if (g_running || g_abandoned) {
        pthread_mutex_unlock(&g_mu);
        return 0;
    }
    g_stop = 0;
    int rc = pthread_create(&g_thread, NULL, closer_main, NULL);
    if (rc == 0)
        g_running = 1;
    pthread_mutex_unlock(&g_mu);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the buffer release thread: %s", strerror(rc));
        return -rc;
    }
    return 0;
}

void pj_closer_run(pj_closer_fn fn, void *arg)
{
    job *j = malloc(sizeof *j);
    pthread_mutex_lock(&g_mu);
    if (!g_running || g_stop || !j) {
        pthread_mutex_unlock(&g_mu);
        free(j);
        fn(arg);
        return;
    }
    j->fn = fn;
    j->arg = arg;
    j->next = NULL;
    if (g_tail)
        g_tail->next = j;
    else
        g_head = j;
    g_tail = j;
    atomic_fetch_add(&g_pending, 1);
    pthread_cond_signal(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

uint32_t pj_closer_pending(void)
{
    return atomic_load(&g_pending);
}

uint64_t pj_closer_running_ms(void)
{
    uint64_t t0 = atomic_load(&g_started_ns);
    if (t0 == 0)
        return 0;
    uint64_t now = mono_ns();
    return now > t0 ? (now - t0) / 1000000u : 0;
}

uint32_t pj_closer_stop(int wait_ms)
{
    pthread_mutex_lock(&g_mu);
    if (!g_running || g_abandoned) {
        uint32_t left = g_abandoned ? atomic_load(&g_pending) : 0;
        pthread_mutex_unlock(&g_mu);
        return left;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += wait_ms / 1000;
    until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    while (atomic_load(&g_pending) > 0)
        if (pthread_cond_timedwait(&g_idle_cv, &g_mu, &until) == ETIMEDOUT)
            break;
    uint32_t left = atomic_load(&g_pending);
    if (left > 0) {
        /* New releases run on their caller's thread from now on; the stuck
         * thread keeps its queue, and ends on its own if it ever drains. */
        g_stop = 1;
        g_abandoned = 1;
        pthread_detach(g_thread);
        pthread_mutex_unlock(&g_mu);
        return left;
    }
    g_stop = 1;
    pthread_cond_signal(&g_cv);
    pthread_mutex_unlock(&g_mu);
    pthread_join(g_thread, NULL);
    pthread_mutex_lock(&g_mu);
    g_running = 0;
    g_stop = 0;
    pthread_mutex_unlock(&g_mu);
    return 0;
}
