/* cuda_common.h — what the cuda backend's GPU suites share (header only:
 * every C file under tests/gpu is its own binary).
 *
 * No Check here: Check forks each test, and a process that has touched CUDA
 * or nng must not fork children that use them (shared/device/RUNNING.md).
 * The suites count checks themselves, print one FAIL line per failure and
 * exit 0 (all passed), 1 (a failure) or 77 (no GPU: skipped).
 *
 * Numerics: a result is compared with the CPU reference (refgemm.h, bf16
 * of an fp32 sum in increasing k) element by element: |y - ref| within
 * 2^-7 |ref| + 2^-12 sum_k |x w| (the two roundings to bf16, and what fp32
 * sums of the same products in another order can differ by, with room to
 * spare), no NaN, no element left at the 0xffff poison inside the block,
 * and every element outside it still 0xffff. The relative L2 error over the
 * block is reported beside it.
 */
#ifndef PJ_TEST_CUDA_COMMON_H
#define PJ_TEST_CUDA_COMMON_H

#include <cjson/cJSON.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/projd_cuda.h"
#include "kernels/bf16.h"
#include "kernels/refgemm.h"
#include "tests/helpers/daemon_check.h"
#include "tests/helpers/daemon_proc.h"
#include "tests/helpers/daemon_test.h"
#include "tests/helpers/wire_client.h"

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

/* The most an element of y may differ from the reference whose value is
 * want, where sabs is sum_k |x w| over its row of x and column of W (the
 * header's comment says why). */
static inline double cc_bound(double want, double sabs)
{
    return ldexp(fabs(want), -7) + ldexp(sabs, -12) + 1e-30;
}

/* Row r of |W| (k floats) into out: the sum in cc_bound for one column of
 * y, where cc_abs_w's whole layer would be too much memory (the layers of
 * the 8B-shaped model that cuda_latency samples). 0, or -1 when out of
 * memory or the format is unknown. */
static CC_UNUSED int cc_abs_w_row(const pj_weights *w, uint32_t r, float *out)
{
    const size_t K = w->k, base = (size_t)r * K;
    if (w->fmt == PJ_FMT_Z12) {
        uint16_t *b = malloc(K * 2);
        if (!b)
            return -1;
        pj_z12_unpack_row(w->z, r, b);
        for (size_t e = 0; e < K; e++)
            out[e] = fabsf(pj_bf16_to_f32(b[e]));
        free(b);
        return 0;
    }
    if (w->fmt != PJ_FMT_BF16 && w->fmt != PJ_FMT_SPLIT)
        return -1;
    for (size_t e = 0; e < K; e++)
        out[e] = fabsf(w->fmt == PJ_FMT_BF16
                           ? pj_bf16_to_f32(w->bf16[base + e])
                           : pj_bf16_to_f32(w->hi[base + e]) + pj_bf16_to_f32(w->lo[base + e]));
    return 0;
}

/* |W| of a layer as floats (n x k, row stride k), made once per weights
 * (the suites' models stay loaded for the whole process). NULL when out of
 * memory or the format is unknown. */
static CC_UNUSED const float *cc_abs_w(const pj_weights *w)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static struct {
        const pj_weights *w;
        float *a;
    } made[64];
    static int n_made;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_made; i++)
        if (made[i].w == w) {
            pthread_mutex_unlock(&mu);
            return made[i].a;
        }
    const size_t count = (size_t)w->n * w->k;
    float *a = malloc(count * sizeof *a);
    uint16_t *b = w->fmt == PJ_FMT_Z12 ? malloc(count * 2) : NULL;
    if (a && (w->fmt != PJ_FMT_Z12 || b)) {
        if (w->fmt == PJ_FMT_Z12)
            pj_z12_unpack(w->z, b, w->k);
        for (size_t e = 0; e < count; e++) {
            float v = w->fmt == PJ_FMT_BF16    ? pj_bf16_to_f32(w->bf16[e])
                      : w->fmt == PJ_FMT_Z12   ? pj_bf16_to_f32(b[e])
                      : w->fmt == PJ_FMT_SPLIT ? pj_bf16_to_f32(w->hi[e]) + pj_bf16_to_f32(w->lo[e])
                                               : NAN;
            a[e] = fabsf(v);
        }
        if (n_made < (int)(sizeof made / sizeof made[0])) {
            made[n_made].w = w;
            made[n_made++].a = a;
        }
    } else {
        free(a);
        a = NULL;
    }
    free(b);
    pthread_mutex_unlock(&mu);
    return a;
}

/* Check a y buffer (count elements, host copy) after shape s ran on the
 * weights w with input x (m rows of w->k, contiguous) against ref (m x
 * w->n, contiguous: pj_ref_project of that x). 0 or -1 with why. */
static CC_UNUSED int cc_verify(const uint16_t *Y, size_t count, const pjc_shape *s, uint32_t m,
                               const pj_weights *w, const uint16_t *x, const uint16_t *ref,
                               double *rel_out, char *why, size_t whylen)
{
    const uint32_t N = w->n, K = w->k;
    const float *aw = cc_abs_w(w);
    float *ax = malloc((size_t)K * sizeof *ax);
    if (!aw || !ax) {
        free(ax);
        snprintf(why, whylen, "cc_verify: out of memory");
        return -1;
    }
    double num = 0, den = 0, worst = 0;
    size_t unwritten = 0, nans = 0, outside = 0, beyond = 0, first_bad = (size_t)-1;
    uint64_t ax_row = UINT64_MAX;
    for (size_t e = 0; e < count; e++) {
        int in = 0;
        uint64_t r = 0, c = 0;
        if (e >= s->y_off) {
            r = (e - s->y_off) / s->y_ld;
            c = (e - s->y_off) % s->y_ld;
            in = r < m && c < s->n;
        }
        if (!in) {
            if (Y[e] != PJC_POISON) {
                outside++;
                if (first_bad == (size_t)-1)
                    first_bad = e;
            }
            continue;
        }
        if (Y[e] == PJC_POISON) {
            unwritten++;
            if (first_bad == (size_t)-1)
                first_bad = e;
            continue;
        }
        float got = pj_bf16_to_f32(Y[e]), want = pj_bf16_to_f32(ref[r * N + c]);
        if (isnan(got)) {
            nans++;
            if (first_bad == (size_t)-1)
                first_bad = e;
            continue;
        }
        if (r != ax_row) {
            for (uint32_t k = 0; k < K; k++)
                ax[k] = fabsf(pj_bf16_to_f32(x[r * K + k]));
            ax_row = r;
        }
        float sabs = 0;
        const float *wr = aw + c * K;
        for (uint32_t k = 0; k < K; k++)
            sabs += ax[k] * wr[k];
        const double err = fabs((double)got - want);
        const double bound = cc_bound(want, sabs);
        if (err > bound) {
            beyond++;
            if (first_bad == (size_t)-1)
                first_bad = e;
        }
        worst = err / bound > worst ? err / bound : worst;
        num += ((double)got - want) * ((double)got - want);
        den += (double)want * want;
    }
    free(ax);
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    if (rel_out)
        *rel_out = rel;
    if (unwritten || nans || outside || beyond) {
        snprintf(why, whylen,
                 "layer %u m %u n %u (x_off %llu x_ld %llu y_off %llu y_ld %llu): %zu beyond the "
                 "bound (worst %.3g of it), rel err %.3g, %zu unwritten, %zu NaN, %zu written "
                 "outside (first bad element %zu)",
                 s->layer, m, s->n, (unsigned long long)s->x_off, (unsigned long long)s->x_ld,
                 (unsigned long long)s->y_off, (unsigned long long)s->y_ld, beyond, worst, rel,
                 unwritten, nans, outside, first_bad);
        return -1;
    }
    return 0;
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

/* Write shape s's reference x into a host image of the x buffer. */
static CC_UNUSED void cc_fill_x(uint16_t *X, const pjc_shape *s)
{
    const pj_weights *w = &pjc_model()->layers[s->layer].w;
    uint32_t m = PJC_MS[s->mi];
    const uint16_t *x = pjc_ref_x(s->layer, s->mi, s->variant);
    for (uint32_t i = 0; i < m; i++)
        memcpy(X + s->x_off + i * s->x_ld, x + (size_t)i * w->k, (size_t)w->k * 2);
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

static CC_UNUSED int cc_summary(const char *suite, long long t0_us)
{
    long p = atomic_load(&cc_pass), f = atomic_load(&cc_fail);
    printf("%s: %ld checks passed, %ld failed (%.1f s)\n", suite, p, f,
           (double)(cc_now_us() - t0_us) / 1e6);
    return f ? 1 : 0;
}

#endif
