/* daemon_proc.h — run build/bin/projd as a child process for a test.
 *
 * Each daemon gets its own directory (mode 0755, so a test child that drops
 * to another uid can reach the socket) in the fixture folder (fixture.h),
 * so that a case that fails before pj_dproc_cleanup leaves nothing once the
 * suite exits. It holds the config file, the socket,
 * the daemon's log (its stderr) and a datagram socket the daemon's
 * sd_notify messages arrive on (NOTIFY_SOCKET), which is how start() knows
 * the daemon is ready. The binary is $PJ_BUILD/bin/projd (PJ_BUILD is set
 * by tests/run-tests.sh; default "build"). fork+exec only: the test process
 * may use nng before or after, the child never does.
 * Every wait takes a timeout in milliseconds.
 */
#ifndef PJ_TEST_DAEMON_PROC_H
#define PJ_TEST_DAEMON_PROC_H

#include <stddef.h>
#include <sys/types.h>

typedef struct pj_dproc {
    pid_t pid;
    int exited; /* waitpid saw it */
    int status; /* raw waitpid status when exited */
    int notify_fd;
    char dir[256];
    char url[320]; /* ipc://<dir>/projd.sock */
    char sock[300];
    char config[300];
    char log[300];
    char notify_path[300];
    char notes[4096]; /* sd_notify messages received, '|'-separated; the newest when more came */
} pj_dproc;

/* Path of the projd binary under test. */
const char *pj_dproc_binary(void);

/* Write a config (defaults + model_path + socket in a new directory + 2 cpu
 * threads + cfg_json applied on top, may be NULL) and start projd with
 * --config and the NULL-terminated extra args (may be NULL). With
 * wait_ready, wait up to timeout_ms for READY=1. Returns 0, or a negative
 * errno with err set (then the log has been printed to stderr). */
int pj_dproc_start(pj_dproc *d, const char *model_path, const char *cfg_json,
                   const char *const *extra_args, int wait_ready, int timeout_ms, char *err,
                   size_t errlen);

/* Prepare the directory and config only (no process); start() uses it. */
int pj_dproc_prepare(pj_dproc *d, const char *model_path, const char *cfg_json, char *err,
                     size_t errlen);

/* Start projd on a prepared directory (another daemon may share the dir's
 * socket when url_override is given). */
int pj_dproc_spawn(pj_dproc *d, const char *const *extra_args, int wait_ready, int timeout_ms,
                   char *err, size_t errlen);

/* Replace the daemon's config file with text, whole (written beside it,
 * then renamed: a SIGHUP never reads half of it). 0 or a negative errno. */
int pj_dproc_replace_config(const pj_dproc *d, const char *text);

/* Wait until a notify message containing needle arrived. 0 or -ETIMEDOUT. */
int pj_dproc_wait_notify(pj_dproc *d, const char *needle, int timeout_ms);

/* Wait for the process to exit. 0 (d->status set) or -ETIMEDOUT. */
int pj_dproc_wait_exit(pj_dproc *d, int timeout_ms);

/* Exit code when it exited normally, 128 + signal when killed, -1 when it
 * has not exited. */
int pj_dproc_exit_code(const pj_dproc *d);

int pj_dproc_signal(pj_dproc *d, int sig);

/* 1 when the log contains needle (waits up to timeout_ms for it). */
int pj_dproc_log_has(pj_dproc *d, const char *needle, int timeout_ms);

/* Copy the log to stderr (for a failing test). */
void pj_dproc_dump_log(const pj_dproc *d);

/* SIGTERM, wait up to timeout_ms, then SIGKILL; returns the exit code (as
 * pj_dproc_exit_code). */
int pj_dproc_stop(pj_dproc *d, int timeout_ms);

/* Stop if running and remove the directory. */
void pj_dproc_cleanup(pj_dproc *d);

#endif
