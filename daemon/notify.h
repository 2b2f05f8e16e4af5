/* notify.h — systemd readiness and status (the sd_notify protocol).
 *
 * All calls are no-ops when the daemon was not started by systemd
 * (NOTIFY_SOCKET unset). A NOTIFY_SOCKET that is set but cannot be used,
 * or that refuses a message, is logged once (a warning naming it and
 * why). The datagrams are sent here rather than through libsystemd's
 * sd_notify because that call blocks when the receiver's queue is full,
 * and the event loop must never block: STATUS= lines are sent without
 * waiting (dropped when the queue is full, they are informational);
 * READY=1, RELOADING=1 and STOPPING=1 wait at most PJ_NOTIFY_WAIT_MS.
 * Thread-safe.
 */
#ifndef PJ_NOTIFY_H
#define PJ_NOTIFY_H

#define PJ_NOTIFY_WAIT_MS 500

/* READY=1 plus a STATUS= line. */
void pj_notify_ready(const char *status);

/* STATUS=<printf text>, never blocks. */
void pj_notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* How long a step of the start may take before systemd's start timeout
 * (TimeoutStartSec=, 90 s by default) may fire, once that has passed. */
#define PJ_NOTIFY_STEP_SEC 120

/* A step of the start: EXTEND_TIMEOUT_USEC=<PJ_NOTIFY_STEP_SEC> and a
 * STATUS= line. A large model's load and the backend's start may outlast
 * TimeoutStartSec; each step extends it while the steps keep coming, so
 * a start that progresses is not killed and one that hangs still is. May
 * wait (PJ_NOTIFY_WAIT_MS): a dropped extension could cost the start.
 * A step of the same kind as the one sent last (the same text up to its
 * first digit: "loading model: layer ") within PJ_NOTIFY_COALESCE_MS of
 * it is not sent: a thousand layers load in under a second, and each
 * message would be a line in the unit's status history for nothing. */
void pj_notify_progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define PJ_NOTIFY_COALESCE_MS 100

/* RELOADING=1, MONOTONIC_USEC=<CLOCK_MONOTONIC now, in µs> and a STATUS=
 * line: a reload (SIGHUP) has started. systemd keeps the unit in
 * "reloading" until the READY=1 that must follow (pj_notify_ready), also
 * when the reload fails. */
void pj_notify_reloading(const char *status);

/* STOPPING=1 plus a STATUS= line. */
void pj_notify_stopping(const char *status);

/* The watchdog timeout systemd asked for (WatchdogSec=), in microseconds:
 * WATCHDOG_USEC, when it is set and WATCHDOG_PID is unset or names this
 * process; else 0 (no watchdog: send nothing). */
unsigned long long pj_notify_watchdog_usec(void);

/* WATCHDOG=1, never blocks (a full queue drops it; the next one counts). */
void pj_notify_watchdog(void);

#endif
