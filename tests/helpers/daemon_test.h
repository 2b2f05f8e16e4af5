/* daemon_test.h — what the suites that run projd share: a daemon started
 * and stopped under Check's assertions, numbers from its STATS, and time.
 */
#ifndef PJ_TEST_DAEMON_TEST_H
#define PJ_TEST_DAEMON_TEST_H

#include <check.h>
#include <stddef.h>

#include "tests/helpers/daemon_proc.h"
#include "tests/helpers/wire_client.h"

/* Start projd on the model with cfg_json applied (may be NULL); fails the
 * test unless it says READY=1 within 30 s. */
void pjd_start(pj_dproc *d, const char *model_path, const char *cfg_json);

/* SIGTERM; fails the test unless projd exits 0 within 30 s (its log is
 * printed then; under ASan a leak at exit is a non-zero code). Removes its
 * directory. */
void pjd_stop(pj_dproc *d);

/* The number at a dotted path of a STATS reply, -1 when absent or when
 * STATS failed. */
double pjd_stat(pjt_client *c, const char *path);

/* Poll STATS until the number at path equals want or timeout_ms passed;
 * returns the last value seen. */
double pjd_wait_stat(pjt_client *c, const char *path, double want, int timeout_ms);

/* One test of a suite. */
typedef struct pjd_case {
    const char *name;
    const TTest *test;
} pjd_case;

/* Run the cases as a Check suite, one case per test (so CK_RUN_CASE=<name>
 * runs just one), each with timeout_s. Returns main's exit code. */
int pjd_run_suite(const char *suite, const pjd_case *cases, size_t n, int timeout_s);

void pjd_sleep_ms(int ms);
long long pjd_now_ms(void); /* CLOCK_MONOTONIC */

#endif
