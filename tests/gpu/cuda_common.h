/* cuda_common.h — what the cuda backend's GPU suites share (header only:
 * every C file under tests/gpu is its own binary).
 *
 * No Check here: Check forks each test, and a process that has touched CUDA
 * or nng must not fork children that use them (shared/device/RUNNING.md).
 * The suites count checks themselves, print one FAIL line per failure and
 * exit 0 (all passed), 1 (a failure) or 77 (no GPU: skipped).
 *
 * Numerics: every result is held to the CPU reference element by element
 * (tests/helpers/ycheck.h: a bound per element for sums in another order,
 * a limit on how many elements may differ at all, no NaN, no poison left
 * inside the block, nothing written outside it).
 */
#ifndef PJ_TEST_CUDA_COMMON_H
#define PJ_TEST_CUDA_COMMON_H

#include <cjson/cJSON.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client/projd_cuda.h"
#include "kernels/bf16.h"
#include "kernels/refgemm.h"
#include "tests/helpers/daemon_check.h"
#include "tests/helpers/daemon_proc.h"
#include "tests/helpers/daemon_test.h"
#include "tests/helpers/wire_client.h"
#include "tests/helpers/ycheck.h"

/* Failure lines are cut to their buffers on purpose. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#define CC_UNUSED   __attribute__((unused))
#define CC_READY_MS 120000
#define CC_REPLY_MS 60000

static atomic_long cc_pass, cc_fail;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            atomic_fetch_add(&cc_pass, 1);                                                         \
        } else {                                                                                   \
            atomic_fetch_add(&cc_fail, 1);                                                         \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            fflush(stdout);                                                                        \
        }                                                                                          \
    } while (0)

static CC_UNUSED long long cc_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static CC_UNUSED void cc_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Number of visible devices; 0 with why set when none. */
static CC_UNUSED int cc_gpu_count(char *why, size_t whylen)
{
    int n = 0;
    cudaError_t ce = cudaGetDeviceCount(&n);
    if (ce != cudaSuccess) {
        snprintf(why, whylen, "%s: %s", cudaGetErrorName(ce), cudaGetErrorString(ce));
        return 0;
    }
    if (n == 0)
        snprintf(why, whylen, "no device");
    return n;
}

static CC_UNUSED uint64_t cc_mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Start projd on the cuda backend with the small test model (extra: more
 * config JSON merged over {"device":{"backend":"cuda"}}, may be NULL). */
static CC_UNUSED int cc_start(pj_dproc *d, const char *model, const char *extra_json, char *err,
                              size_t errlen)
{
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "{\"device\":{\"backend\":\"cuda\"},\"log\":{\"level\":\"info\"}}");
    int rc = pj_dproc_prepare(d, model, cfg, err, errlen);
    if (rc == 0 && extra_json) {
        /* Apply the extra JSON on top of what prepare wrote. */
        pj_config c;
        pj_config_defaults(&c);
        rc = pj_config_apply_file(&c, d->config, err, errlen);
        if (rc == 0)
            rc = pj_config_apply_json(&c, extra_json, strlen(extra_json), err, errlen);
        if (rc == 0) {
            char *text = pj_config_to_json(&c);
            FILE *f = text ? fopen(d->config, "w") : NULL;
            if (f) {
                fputs(text, f);
                fclose(f);
            } else {
                rc = -EIO;
                snprintf(err, errlen, "cannot rewrite %s", d->config);
            }
            free(text);
        }
    }
    if (rc == 0)
        rc = pj_dproc_spawn(d, NULL, 1, CC_READY_MS, err, errlen);
    return rc;
}

/* Stop with SIGTERM; the exit code must be 0. */
static CC_UNUSED void cc_stop(pj_dproc *d, const char *what)
{
    int code = pj_dproc_stop(d, 60000);
    CHECK(code == 0, "%s: projd exit code %d", what, code);
    if (code != 0)
        pj_dproc_dump_log(d);
    pj_dproc_cleanup(d);
}

/* Copy lines of the daemon log that contain needle to stdout. */
static CC_UNUSED void cc_print_log_lines(const pj_dproc *d, const char *needle)
{
    FILE *f = fopen(d->log, "r");
    if (!f)
        return;
    char line[4096];
    while (fgets(line, sizeof line, f))
        if (strstr(line, needle))
            fputs(line, stdout);
    fclose(f);
}

/* A random shape of the small model (every kind of offset and stride),
 * or with graph = 1 the captured form (n = max_n, contiguous, offset 0). */
static CC_UNUSED pjc_shape cc_shape(uint64_t *seed, uint32_t layer, uint32_t mi, int graph)
{
    const pj_model *model = pjc_model();
    const pj_model_layer *L = &model->layers[layer];
    uint64_t r = cc_mix(seed);
    pjc_shape s = {.layer = layer, .mi = mi, .variant = (uint32_t)(r >> 4) & 1};
    if (graph) {
        s.n = L->max_n;
        s.x_ld = L->w.k;
        s.y_ld = s.n;
        return s;
    }
    s.n = (r >> 8) % 3 == 0 ? L->max_n : 1 + (uint32_t)((r >> 12) % L->max_n);
    s.x_off = (r >> 24) % 64;
    s.x_ld = L->w.k + (r >> 32) % 9;
    s.y_off = (r >> 40) % 64;
    s.y_ld = s.n + (r >> 48) % 9;
    return s;
}

/* Reaps child pid within timeout_ms, else kills it (SIGKILL) and reaps
 * that: pid when it ended by itself in time, 0 when it was killed here, -1
 * when it could not be reaped. A child stuck in a CUDA call must not hold
 * the suite past the visit's limit. */
static CC_UNUSED pid_t cc_reap(pid_t pid, int timeout_ms, int *status)
{
    const long long end = cc_now_us() + timeout_ms * 1000LL;
    pid_t w;
    while ((w = waitpid(pid, status, WNOHANG)) == 0 && cc_now_us() < end)
        cc_sleep_ms(20);
    if (w != 0)
        return w == pid ? pid : -1;
    kill(pid, SIGKILL);
    return waitpid(pid, status, 0) == pid ? 0 : -1;
}

/* STATS whose failure is counted: a check that reads the reply would
 * otherwise be skipped without a word. */
#define CC_STATS(c, st) cc_stats_checked((c), (st), __FILE__, __LINE__)
static CC_UNUSED int cc_stats_checked(pjt_client *c, cJSON **st, const char *file, int line)
{
    int rc = pjt_stats(c, st);
    if (rc == PJ_OK) {
        atomic_fetch_add(&cc_pass, 1);
        return rc;
    }
    atomic_fetch_add(&cc_fail, 1);
    printf("FAIL %s:%d: STATS: %d %s\n", file, line, rc, rc > 0 ? c->err.msg : "");
    fflush(stdout);
    return rc;
}

/* Shape s's reference x in a host image of the x buffer (count
 * elements), everything else a NaN (pjc_fill_x, as pjc_stage stages it):
 * an engine that reads x past its rows carries the NaN into y, where
 * pjy_verify sees it. */
static CC_UNUSED void cc_fill_x(uint16_t *X, size_t count, const pjc_shape *s)
{
    pjc_fill_x(X, count, s, PJC_MS[s->mi], pjc_model()->layers[s->layer].w.k,
               pjc_ref_x(s->layer, s->mi, s->variant));
}

/* Registers the cudaMalloc allocation at p (its base) as a CUDA IPC
 * buffer on c: *id, or a pj_status with why set. */
static CC_UNUSED int cc_register_dev(pjt_client *c, void *p, uint32_t *id, char *why, size_t whylen)
{
    projd_cuda_region r;
    int rc = projd_cuda_describe(p, &r, why, whylen);
    if (rc != 0)
        return rc;
    pj_register req;
    projd_cuda_register_req(&r, &req);
    rc = pjt_register_raw(c, &req, id);
    if (rc != PJ_OK)
        snprintf(why, whylen, "REGISTER: %d %s", rc, c->err.msg);
    return rc;
}

/* PROJECT with event handles (NULL when the flag is not set). */
static CC_UNUSED int cc_project_ev(pjt_client *c, uint32_t flags, const pj_op *ops, uint32_t n_ops,
                                   const uint8_t *wait_ev, const uint8_t *signal_ev, pj_done *done,
                                   pj_op_result *res)
{
    pj_project p;
    memset(&p, 0, sizeof p);
    p.flags = flags;
    p.n_ops = n_ops;
    p.ops = (pj_op *)ops;
    if (wait_ev)
        memcpy(p.wait_event, wait_ev, PJ_WIRE_IPC_HANDLE_SIZE);
    if (signal_ev)
        memcpy(p.signal_event, signal_ev, PJ_WIRE_IPC_HANDLE_SIZE);
    pj_wbuf_reset(&c->wb);
    pj_enc_project(&c->wb, c->next_id++, &p);
    int rc = pjt_call(c, PJ_MSG_DONE);
    if (rc != PJ_OK)
        return rc;
    char err[256];
    done->ops = res;
    if (pj_dec_done(c->body, c->rh.body_len, n_ops, done, err, sizeof err) != PJ_OK)
        return -EPROTO;
    return PJ_OK;
}

/* Percentile of a sorted array. */
static CC_UNUSED double cc_pct(const double *sorted, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

static CC_UNUSED int cc_cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A host function for cudaLaunchHostFunc that sleeps arg microseconds: it
 * holds the stream it is launched on (and an event recorded behind it)
 * that long, a client's wait the daemon must honour. */
static CC_UNUSED void CUDART_CB cc_sleep_host(void *arg)
{
    usleep((useconds_t)(uintptr_t)arg);
}

static CC_UNUSED int cc_summary(const char *suite, long long t0_us)
{
    long p = atomic_load(&cc_pass), f = atomic_load(&cc_fail);
    pjy_seen_print(suite);
    printf("%s: %ld checks passed, %ld failed (%.1f s)\n", suite, p, f,
           (double)(cc_now_us() - t0_us) / 1e6);
    return f ? 1 : 0;
}

#endif
