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
    _Atomic uint32_t cur_pipe; /* the listener's pipe now (0: none) */
    /* The probe pipe whose REM_POST is awaited, cleared by that notice
     * alone: pair0 refuses (and closes) a second pipe that comes while
     * the probe is still being retired, and that pipe's notice can come
     * after the probe's. */
    _Atomic uint32_t awaited;
    _Atomic uint64_t probes;
    /* The loop's own. */
    uint32_t probe_pipe; /* closed, awaited (0: none in flight) */
    uint64_t probe_ns, last_ns;
    uint64_t seen_ns; /* the previous check */
    /* Tests only (PROJD_REAPWATCH_BLOCK=N, or dN): the Nth probe's notice
     * on the listener's side (on the dialer's side) never returns, which
     * blocks nng's reaper as its ipc defect does. */
    uint64_t block_at;
    int block_dialer;
};

/* Checks further apart than this (the loop's watch runs every 100 ms)
 * mean the process, not the reaper, was held. */
#define GAP_NS 1000000000ull

static void block_reaper_if_asked(pj_reapwatch *w, int dialer_side)
{
    if (!w->block_at || dialer_side != w->block_dialer || atomic_load(&w->probes) + 1 < w->block_at)
        return;
    const struct timespec t = {3600, 0};
    for (;;)
        nanosleep(&t, NULL);
}

static void lsn_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    pj_reapwatch *w = arg;
    uint32_t id = (uint32_t)nng_pipe_id(p);
    if (ev == NNG_PIPE_EV_ADD_POST) {
        atomic_store(&w->cur_pipe, id);
        return;
    }
    block_reaper_if_asked(w, 0);
    /* A pipe gone is no longer one to close (the dialer's next may not
     * have come yet). */
    uint32_t expect = id;
    atomic_compare_exchange_strong(&w->cur_pipe, &expect, 0);
    expect = id;
    atomic_compare_exchange_strong(&w->awaited, &expect, 0);
}

/* The dialer connects again once its pipe is retired; a reaper blocked
 * there leaves the watch without a pipe to close. */
static void dlr_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    (void)p;
    (void)ev;
    block_reaper_if_asked(arg, 1);
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
    if (blk && *blk) {
        w->block_dialer = *blk == 'd';
        blk += w->block_dialer;
        w->block_at = env_u32(&blk);
    }
    w->every_ns = (uint64_t)(every_ms ? every_ms : 1) * 1000000ull;
    w->stuck_ns = (uint64_t)(stuck_ms ? stuck_ms : 1) * 1000000ull;
    /* inproc names are the process's own; the address keeps two watches
     * (a test's servers) apart. */
    char url[64];
    snprintf(url, sizeof url, "inproc://projd-reapwatch-%p", (void *)w);
    int rv = nng_pair0_open(&w->lsn);
    w->lsn_open = rv == 0;
    if (rv == 0)
        rv = nng_pipe_notify(w->lsn, NNG_PIPE_EV_ADD_POST, lsn_cb, w);
    if (rv == 0)
        rv = nng_pipe_notify(w->lsn, NNG_PIPE_EV_REM_POST, lsn_cb, w);
    if (rv == 0)
        rv = nng_listen(w->lsn, url, NULL, 0);
    if (rv == 0) {
        rv = nng_pair0_open(&w->dlr);
        w->dlr_open = rv == 0;
    }
    /* The next probe pipe is there at once (the default waits 100 ms). */
    if (rv == 0)
        rv = nng_socket_set_ms(w->dlr, NNG_OPT_RECONNMINT, 10);
    if (rv == 0)
        rv = nng_pipe_notify(w->dlr, NNG_PIPE_EV_REM_POST, dlr_cb, w);
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
    /* Time the process did not run (SIGSTOP, a frozen cgroup, a paused
     * VM, a stalled loop) is not the reaper's: after it the reaper may
     * not have run yet either. The clocks move past such a gap. */
    if (w->seen_ns && now_ns - w->seen_ns > GAP_NS) {
        w->probe_ns += now_ns - w->seen_ns;
        w->last_ns += now_ns - w->seen_ns;
    }
    w->seen_ns = now_ns;
    if (w->probe_pipe) {
        if (atomic_load(&w->awaited) == 0) {
            w->probe_pipe = 0;
            w->last_ns = now_ns;
            atomic_fetch_add(&w->probes, 1);
            return 0;
        }
        const uint64_t waited = now_ns - w->probe_ns;
        return waited > w->stuck_ns ? waited : 0;
    }
    const uint64_t since = now_ns - w->last_ns;
    if (since < w->every_ns)
        return 0;
    const uint32_t id = atomic_load(&w->cur_pipe);
    /* The dialer connects again within milliseconds of its pipe's
     * retirement, on the reaper: no pipe for longer than a retirement may
     * take is the reaper blocked before it got there. */
    if (!id)
        return since > w->stuck_ns + w->every_ns ? since - w->every_ns : 0;
    atomic_store(&w->awaited, id);
    nng_pipe p = NNG_PIPE_INITIALIZER;
    p.id = id;
    if (nng_pipe_close(p) != 0) { /* gone already: the next one is probed */
        atomic_store(&w->awaited, 0);
        return 0;
    }
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
