/* startsig.h — SIGTERM, SIGINT and SIGHUP while projd starts.
 *
 * Between the configuration's read and the event loop's own handlers
 * (uv_signal_start) come the model load and the backend's start: under a
 * second for the reference model, minutes for a large one on a slow disk.
 * Until the loop takes over, these signals are caught here and remembered:
 *   - SIGTERM / SIGINT: the start stops at its next step (the next layer of
 *     the load, the backend's next phase, before listening) and projd exits
 *     0 without serving, which is what `systemctl stop` during a start asks
 *     for; before, the default action ended projd by the signal (143).
 *   - SIGHUP: replayed once projd is ready, so a reload asked for during the
 *     start re-reads a configuration edited after the start read it (its
 *     default action would kill; ignoring it lost the edit).
 *     A step that does not end (a model file on a hung network mount, a
 *     CUDA call waiting for a wedged MPS server) is not waited for past
 *     PJ_STARTSIG_GRACE_S, nor after a second stop signal: projd then exits
 *     0 at once, saying so on stderr.
 * The handlers only store the signal number (async-signal-safe) and are
 * installed with SA_RESTART, so the load's reads are not cut short. */
#ifndef PJ_DAEMON_STARTSIG_H
#define PJ_DAEMON_STARTSIG_H

/* Seconds a stop signal waits for the start's next step. */
#define PJ_STARTSIG_GRACE_S 10

/* Catch the three signals, and SIGALRM for the grace (call once, before
 * the model load). */
void pj_startsig_catch(void);

/* The stop was taken at a step: the grace's alarm is not needed. */
void pj_startsig_disarm(void);

/* SIGTERM or SIGINT, whichever came first since pj_startsig_catch; 0 if
 * neither did. */
int pj_startsig_stop(void);

/* 1 when a SIGHUP came since the last call (and forget it), else 0. */
int pj_startsig_take_hup(void);

#endif
