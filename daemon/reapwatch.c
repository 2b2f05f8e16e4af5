/* reapwatch.c — see reapwatch.h. */
#include "daemon/reapwatch.h"

#include <nng/nng.h>
#include <nng/protocol/pair0/pair.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct pj_reapwatch {
    nng_socket lsn, dlr;
    int lsn_open, dlr_open;
    uint64_t every_ns, stuck_ns;
    /* Written by nng's threads (the notices), read on the loop. */
    _Atomic uint32_t cur_pipe;  /* the listener's pipe now (0: none yet) */
    _Atomic uint32_t gone_pipe; /* the last pipe whose REM_POST came */
    /* The loop's own. */
    uint32_t probe_pipe; /* closed, its REM_POST awaited (0: none) */
    uint64_t probe_ns, last_ns;
    _Atomic uint64_t probes;
    /* Tests only (PROJD_REAPWATCH_BLOCK=N): the notice of the Nth probe
     * never returns, which blocks nng's reaper as its ipc defect does. */
    uint64_t block_at;
};

static void pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    pj_reapwatch *w = arg;
    uint32_t id = (uint32_t)nng_pipe_id(p);
    if (ev == NNG_PIPE_EV_ADD_POST) {
        atomic_store(&w->cur_pipe, id);
        return;
    }
    if (w->block_at && atomic_load(&w->probes) + 1 >= w->block_at) {
        const struct timespec t = {3600, 0};
        for (;;)
            nanosleep(&t, NULL);
    }
    /* A pipe gone is no longer one to close (the dialer's next may not
     * have come yet). */
    uint32_t expect = id;
    atomic_compare_exchange_strong(&w->cur_pipe, &expect, 0);
    atomic_store(&w->gone_pipe, id);
}

static uint32_t env_u32(const char **s)
{
    char *end;
    unsigned long v = strtoul(*s, &end, 10);
    *s = end;
    return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

pj_reapwatch *pj_reapwatch_open(uint32_t every_ms, uint32_t stuck_ms, char *err, size_t errlen)
{
    pj_reapwatch *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    /* Tests only: "EVERY,STUCK" in ms, so that a suite need not wait 30 s. */
    const char *ms = getenv("PROJD_REAPWATCH_MS");
    if (ms && *ms) {
        every_ms = env_u32(&ms);
        if (*ms == ',') {
            ms++;
            stuck_ms = env_u32(&ms);
        }
    }
    const char *blk = getenv("PROJD_REAPWATCH_BLOCK");
    if (blk && *blk)
        w->block_at = env_u32(&blk);
    w->every_ns = (uint64_t)(every_ms ? every_ms : 1) * 1000000ull;
    w->stuck_ns = (uint64_t)(stuck_ms ? stuck_ms : 1) * 1000000ull;
    /* inproc names are the process's own; the address keeps two watches
     * (a test's servers) apart. */
    char url[64];
    snprintf(url, sizeof url, "inproc://projd-reapwatch-%p", (void *)w);
    int rv = nng_pair0_open(&w->lsn);
    w->lsn_open = rv == 0;
    if (rv == 0)
        rv = nng_pipe_notify(w->lsn, NNG_PIPE_EV_ADD_POST, pipe_cb, w);
    if (rv == 0)
        rv = nng_pipe_notify(w->lsn, NNG_PIPE_EV_REM_POST, pipe_cb, w);
    if (rv == 0)
        rv = nng_listen(w->lsn, url, NULL, 0);
    if (rv == 0) {
        rv = nng_pair0_open(&w->dlr);
        w->dlr_open = rv == 0;
    }
    /* The next probe pipe is there at once (the default waits 100 ms). */
    if (rv == 0)
        rv = nng_socket_set_ms(w->dlr, NNG_OPT_RECONNMINT, 10);
    /* Not blocking: the dialer connects, and connects again after each
     * probe, on its own. */
    if (rv == 0)
        rv = nng_dial(w->dlr, url, NULL, NNG_FLAG_NONBLOCK);
    if (rv != 0) {
        snprintf(err, errlen, "nng's reaper watch (%s): %s", url, nng_strerror(rv));
        pj_reapwatch_close(w);
        return NULL;
    }
    return w;
}

uint64_t pj_reapwatch_check(pj_reapwatch *w, uint64_t now_ns)
{
    if (!w)
        return 0;
    if (!w->last_ns)
        w->last_ns = now_ns;
    if (w->probe_pipe) {
        if (atomic_load(&w->gone_pipe) == w->probe_pipe) {
            w->probe_pipe = 0;
            w->last_ns = now_ns;
            atomic_fetch_add(&w->probes, 1);
            return 0;
        }
        const uint64_t waited = now_ns - w->probe_ns;
        return waited > w->stuck_ns ? waited : 0;
    }
    if (now_ns - w->last_ns < w->every_ns)
        return 0;
    const uint32_t id = atomic_load(&w->cur_pipe);
    if (!id) /* the dialer has not connected again yet */
        return 0;
    nng_pipe p = NNG_PIPE_INITIALIZER;
    p.id = id;
    if (nng_pipe_close(p) != 0) /* gone already: its notice is on its way */
        return 0;
    w->probe_pipe = id;
    w->probe_ns = now_ns;
    return 0;
}

uint64_t pj_reapwatch_probes(const pj_reapwatch *w)
{
    return w ? atomic_load(&w->probes) : 0;
}

void pj_reapwatch_close(pj_reapwatch *w)
{
    if (!w)
        return;
    if (w->dlr_open)
        nng_close(w->dlr);
    if (w->lsn_open)
        nng_close(w->lsn);
    free(w);
}
