/* test_engines.c — the GPU correctness sweep of the projection engines.
 *
 * A: 2 weight seeds x 5 reference layers x m in {1..33, 64, 100, 127, 128,
 *    129, 200, 255, 256} x normal and outlier inputs. For each case the
 *    device reference is first checked bit for bit against the CPU
 *    reference (refgemm.h) on sampled rows, then every engine that accepts
 *    the shape runs with its default knobs, plus the dispatcher's choice
 *    (with the tuned table when PJ_TUNE_TABLE names one): outputs must all
 *    be written, lie within the bound of the reference, and (deterministic
 *    engines) repeat bit for bit; gemvz must reproduce the weights' bits on
 *    one-hot inputs placed on exception columns.
 * B: every compiled variant of every engine (knob combinations the engine
 *    accepts) on representative shapes, with the same checks.
 * C: the tuned-table loader rejects entries that cannot run on this device.
 *
 * Usage: test_engines [--quick]   (--quick: one seed, fewer m, for tuning visits)
 * Exit status 0 only when every check passed.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/dispatch.h"
#include "kernels/engcheck.h"
#include "kernels/engine.h"

typedef struct tlayer {
    const char *name;
    uint32_t N, K, n;
    pj_format fmt;
} tlayer;

static const tlayer tl[5] = {
    {"qkv_gate", 4608, 4096, 4608, PJ_FMT_Z12}, {"o", 4096, 2048, 4096, PJ_FMT_Z12},
    {"pooler", 8192, 4096, 8192, PJ_FMT_Z12},   {"unpooler", 8192, 4096, 1024, PJ_FMT_Z12},
    {"router", 256, 4096, 256, PJ_FMT_SPLIT},
};

static unsigned long long n_checks, n_fail;
static int quick;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fail_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail_line(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL ");
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    n_fail++;
}

/* A call of the first n rows of layer L at m tokens, on c's x and y. */
static pj_eng_call layer_call(const pj_chk_ctx *c, const pj_eng_layer *L, pj_eng_ws *ws, uint32_t m,
                              uint32_t n)
{
    return pj_chk_call(L, ws, c->dx, c->dy, m, n);
}

/* Check one (engine, knobs) on what c holds now; counts and reports. */
static void check_one(pj_chk_ctx *c, pj_eng_ws *ws, pj_eng_kind k, const pj_eng_knobs *kn,
                      const char *ctx)
{
    const pj_eng_call call = layer_call(c, &c->cur->L, ws, c->cur_m, c->cur_n);
    char why[200], ks[96];
    if (pj_eng_can_run(k, kn, &call, &c->lim, why, sizeof why))
        return;
    pj_eng_knobs_str(k, kn, ks, sizeof ks);
    pj_chk_result res;
    n_checks++;
    int rc = pj_chk_run(c, ws, k, kn, &res);
    if (rc) {
        fail_line("%s %s(%s): run error %d: %s", ctx, pj_eng_name(k), ks, rc, res.why);
        cudaError_t ce = cudaDeviceSynchronize();
        if (ce != cudaSuccess) {
            printf("CUDA context lost (%s): stopping\n", cudaGetErrorString(ce));
            exit(1);
        }
        return;
    }
    if (!res.ok)
        fail_line("%s %s(%s): %s", ctx, pj_eng_name(k), ks, res.why);
}

static void part_a(pj_chk_ctx *c, const pj_tune_table *table)
{
    static const uint32_t extra[] = {64, 100, 127, 128, 129, 200, 255, 256};
    uint32_t mlist[64];
    int nm = 0;
    for (uint32_t m = 1; m <= 33; m++)
        if (!quick || m <= 2 || m == 5 || m == 8 || m == 9 || m == 16 || m == 17 || m == 31 ||
            m == 32 || m == 33)
            mlist[nm++] = m;
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        if (!quick || extra[i] == 100 || extra[i] == 128 || extra[i] == 256)
            mlist[nm++] = extra[i];
    const int nseeds = quick ? 1 : 2;
    char err[256], ctx[128];
    for (int seed = 1; seed <= nseeds; seed++) {
        for (int li = 0; li < 5; li++) {
            double t0 = now_s();
            unsigned long long f0 = n_fail, c0 = n_checks;
            pj_chk_layer L;
            pj_eng_ws ws;
            if (pj_chk_layer_make(&L, tl[li].name, tl[li].N, tl[li].K, tl[li].fmt,
                                  1000u * seed + li, err, sizeof err) ||
                pj_eng_ws_init(&L.L, 256, c->s, &ws, err, sizeof err)) {
                fail_line("layer %s seed %d: %s", tl[li].name, seed, err);
                continue;
            }
            for (int mi = 0; mi < nm; mi++)
                for (int kind = 0; kind < 2; kind++) {
                    const uint32_t m = mlist[mi];
                    unsigned long long cpu_mis = 0;
                    snprintf(ctx, sizeof ctx, "seed %d %s m=%u %s", seed, tl[li].name, m,
                             kind ? "outlier" : "normal");
                    if (pj_chk_prepare(c, &L, m, tl[li].n, kind, 77u * m + kind + seed, 12,
                                       &cpu_mis, err, sizeof err)) {
                        fail_line("%s: prepare: %s", ctx, err);
                        continue;
                    }
                    n_checks++;
                    if (cpu_mis)
                        fail_line("%s: device reference differs from the CPU reference in %llu "
                                  "sampled outputs",
                                  ctx, cpu_mis);
                    for (int e = 0; e < PJ_ENG_COUNT; e++) {
                        pj_eng_knobs kn = pj_eng_default_knobs((pj_eng_kind)e, &L.L, m);
                        check_one(c, &ws, (pj_eng_kind)e, &kn, ctx);
                    }
                    const pj_eng_call call = layer_call(c, &L.L, &ws, m, tl[li].n);
                    pj_eng_kind k;
                    pj_eng_knobs kn;
                    if (pj_eng_choose(table, NULL, NULL, &call, &c->lim, &k, &kn) < 0)
                        fail_line("%s: the dispatcher found no engine", ctx);
                    else
                        check_one(c, &ws, k, &kn, ctx);
                }
            printf("A seed %d %-9s: %llu checks, %llu failed (%.1f s)\n", seed, tl[li].name,
                   n_checks - c0, n_fail - f0, now_s() - t0);
            fflush(stdout);
            pj_eng_ws_free(&ws);
            pj_chk_layer_free(&L);
        }
    }
}

static void sweep_variants(pj_chk_ctx *c, pj_chk_layer *L, pj_eng_ws *ws, pj_eng_kind k,
                           const uint32_t *mlist, int nm, const uint8_t *kslist, int nks)
{
    char err[256], ctx[128];
    double t0 = now_s();
    unsigned long long f0 = n_fail, c0 = n_checks, ncl = 0, nwg = 0, nz = 0, nzws = 0, ntma = 0,
                       nts = 0, nxm = 0, nxr = 0, nst = 0, nlt = 0;
    static const uint8_t nws[] = {4, 8, 16};
    static const uint8_t us[] = {1, 2, 4, 8};
    for (int mi = 0; mi < nm; mi++) {
        const uint32_t m = mlist[mi];
        uint32_t n = L->L.N == 8192 ? 1024 : L->L.N;
        snprintf(ctx, sizeof ctx, "variants %s m=%u", L->L.name, m);
        if (pj_chk_prepare(c, L, m, n, 1, 991u + m, 0, NULL, err, sizeof err)) {
            fail_line("%s: prepare: %s", ctx, err);
            continue;
        }
        pj_eng_knobs kn;
        for (int s = 0; s < nks; s++) {
            if (k == PJ_ENG_CUBLAS) {
                /* The baseline algorithms and every candidate of the
                 * cuBLASLt heuristic's list (those past its end refused). */
                for (int a = 0; a <= PJ_ENG_CUBLAS_MAX_ALGO; a++) {
                    memset(&kn, 0, sizeof kn);
                    kn.algo = (uint8_t)a;
                    const unsigned long long before = n_checks;
                    check_one(c, ws, k, &kn, ctx);
                    nlt += a >= 2 ? n_checks - before : 0;
                }
                continue;
            }
            if (k == PJ_ENG_SPLITK || (k == PJ_ENG_ROUTER && m > 32)) {
                for (int t = 0; t < PJ_ENG_TGEMM_TILES; t++)
                    for (int v = 0; v < 16; v++) {
                        if ((v & 1) && kslist[s] < 2)
                            continue;
                        const int cl = v & 1;
                        memset(&kn, 0, sizeof kn);
                        kn.tile = (uint8_t)t;
                        kn.ks = kslist[s];
                        kn.cl = (uint8_t)cl;
                        kn.pipe = (uint8_t)(v >> 1);
                        const unsigned long long before = n_checks;
                        check_one(c, ws, k, &kn, ctx);
                        ncl += cl ? n_checks - before : 0;
                        nwg += kn.pipe >= 2 ? n_checks - before : 0;
                        nz += kn.pipe == 5 || kn.pipe == 6 ? n_checks - before : 0;
                        nzws += kn.pipe == 6 ? n_checks - before : 0;
                        ntma += kn.pipe == 7 ? n_checks - before : 0;
                    }
                continue;
            }
            static const uint8_t pipes[] = {0, 1, 5};
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 4; j++)
                    for (int p = 0; p < 3; p++)
                        for (int x = 0; x < (k == PJ_ENG_GEMVZ && p == 2 ? 4 : 2); x++)
                            for (int cl = 0; cl < ((k == PJ_ENG_GEMVZ) == (p == 2) ? 3 : 1); cl++)
                                for (int r = 1; r <= (k == PJ_ENG_GEMVZ ? 2 : 1); r *= 2)
                                    for (int rb = 1; rb <= 4; rb *= 2) {
                                        memset(&kn, 0, sizeof kn);
                                        kn.nw = nws[i];
                                        kn.u = us[j];
                                        kn.pipe = pipes[p];
                                        kn.ks = kslist[s];
                                        kn.r = (uint8_t)r;
                                        /* cl = 2 here: gemvz's tail split instead of the
                                         * cluster (ks = 1 only; 4 ways). */
                                        if (cl == 2 && (k != PJ_ENG_GEMVZ || kslist[s] != 1))
                                            continue;
                                        kn.cl = (uint8_t)(cl == 1);
                                        kn.ts = (uint8_t)(cl == 2 ? 4 : 0);
                                        kn.rb = (uint8_t)rb;
                                        if (k == PJ_ENG_GEMVZ)
                                            kn.xs = (uint8_t)x;
                                        else
                                            kn.minb = (uint8_t)x;
                                        const unsigned long long before = n_checks;
                                        check_one(c, ws, k, &kn, ctx);
                                        ncl += cl == 1 ? n_checks - before : 0;
                                        nts += cl == 2 ? n_checks - before : 0;
                                        nxm += k == PJ_ENG_GEMVZ && x == 3 ? n_checks - before : 0;
                                    }
            /* gemvz with x shared by the CTA (xs = 4): 1, 2 or 4 warps per
             * row block, r groups reading one copy of x, with and without
             * the cluster reduction. */
            static const uint8_t nwx[] = {1, 2, 4};
            for (int i = 0; i < 3 && k == PJ_ENG_GEMVZ; i++)
                for (int j = 0; j < 2; j++)
                    for (int r = 1; r <= 4; r *= 2)
                        for (int rb = 1; rb <= 2; rb++)
                            for (int cl = 0; cl < 2; cl++) {
                                memset(&kn, 0, sizeof kn);
                                kn.nw = nwx[i];
                                kn.u = us[j];
                                kn.pipe = 5;
                                kn.xs = 4;
                                kn.ks = kslist[s];
                                kn.r = (uint8_t)r;
                                kn.rb = (uint8_t)rb;
                                kn.cl = (uint8_t)cl;
                                const unsigned long long before = n_checks;
                                check_one(c, ws, k, &kn, ctx);
                                nxr += n_checks - before;
                                ncl += cl ? n_checks - before : 0;
                            }
            /* gemvz with a 2-stage ring (st = 2, round 12; m > 8, xs = 2,
             * nw 4/8, rb 1/2); the partial sums in the ring. */
            for (int i = 0; i < 2 && k == PJ_ENG_GEMVZ && m > 8; i++)
                for (int j = 0; j < 2; j++)
                    for (int r = 1; r <= 2; r++)
                        for (int rb = 1; rb <= 2; rb++) {
                            memset(&kn, 0, sizeof kn);
                            kn.nw = nws[i];
                            kn.u = us[j];
                            kn.pipe = 5;
                            kn.xs = 2;
                            kn.ks = kslist[s];
                            kn.r = (uint8_t)r;
                            kn.rb = (uint8_t)rb;
                            kn.st = 2;
                            const unsigned long long before = n_checks;
                            check_one(c, ws, k, &kn, ctx);
                            nst += n_checks - before;
                        }
        }
    }
    /* cl = 1 is refused silently where no cluster fits: insist that the
     * router's and gemvz's sweeps (ks >= 2 at m <= 32) and the tiled
     * GEMMs' (ks >= 2 above) ran some. */
    if ((k == PJ_ENG_ROUTER || k == PJ_ENG_GEMVZ || k == PJ_ENG_SPLITK) && !ncl)
        fail_line("variants %s: no cl=1 variant ran", L->L.name);
    /* And gemvz's tail split (ts = 4) where ks = 1 is swept. */
    if (k == PJ_ENG_GEMVZ && kslist[0] == 1 && !nts)
        fail_line("variants %s: no ts=4 (tail split) variant ran", L->L.name);
    /* And its m-token x staging (xs = 3) where m <= 8 is swept. */
    if (k == PJ_ENG_GEMVZ && mlist[0] <= 8 && !nxm)
        fail_line("variants %s: no xs=3 variant ran", L->L.name);
    /* And x shared by the CTA (xs = 4) wherever gemvz is swept. */
    if (k == PJ_ENG_GEMVZ && !nxr)
        fail_line("variants %s: no xs=4 variant ran", L->L.name);
    /* And cuBLASLt's candidates where cuBLAS is swept. */
    if (k == PJ_ENG_CUBLAS && !nlt)
        fail_line("variants %s: no cuBLASLt candidate (algo >= 2) ran", L->L.name);
    /* And the 2-stage ring (st = 2) where m > 8 is swept. */
    if (k == PJ_ENG_GEMVZ && mlist[nm - 1] > 8 && !nst)
        fail_line("variants %s: no st=2 variant ran", L->L.name);
    /* The same for the tiled GEMM's wgmma main loops (pipe = 2-4). */
    if ((k == PJ_ENG_SPLITK || (k == PJ_ENG_ROUTER && mlist[0] > 32)) && !nwg)
        fail_line("variants %s: no pipe=2-5 (wgmma) variant ran", L->L.name);
    /* And its warp-specialised TMA form (pipe = 7). */
    if ((k == PJ_ENG_SPLITK || (k == PJ_ENG_ROUTER && mlist[0] > 32)) && !ntma)
        fail_line("variants %s: no pipe=7 (warp-specialised TMA) variant ran", L->L.name);
    /* And its z12 form (pipe = 5) on z12 layers. */
    if (k == PJ_ENG_SPLITK && L->L.fmt == PJ_FMT_Z12 && (!nz || !nzws))
        fail_line("variants %s: no pipe=5 or no pipe=6 (z12 wgmma) variant ran", L->L.name);
    printf("B %-7s on %-9s: %llu checks (%llu cl=1, %llu wgmma, %llu tma-ws, %llu z12, %llu xs=4, "
           "%llu st=2), %llu failed (%.1f s)\n",
           pj_eng_name(k), L->L.name, n_checks - c0, ncl, nwg, ntma, nz, nxr, nst, n_fail - f0,
           now_s() - t0);
    fflush(stdout);
}

/* The streamed GEMV (pipe = 2): ring depth, unit width (K / ks), row blocks
 * per unit, one or two CTAs per SM; unit widths that do not divide the
 * consumers' k are refused by the engine and skipped. */
static void sweep_streamed(pj_chk_ctx *c, pj_chk_layer *L, pj_eng_ws *ws, pj_eng_kind k,
                           const uint32_t *mlist, int nm)
{
    char err[256], ctx[128];
    double t0 = now_s();
    unsigned long long f0 = n_fail, c0 = n_checks, n3 = 0;
    static const uint8_t nws[] = {4, 8};
    static const uint8_t us[] = {2, 3, 8};
    static const uint8_t kss[] = {2, 4, 16, 32};
    for (int mi = 0; mi < nm; mi++) {
        const uint32_t m = mlist[mi];
        uint32_t n = L->L.N == 8192 ? 1024 : L->L.N;
        snprintf(ctx, sizeof ctx, "streamed %s m=%u", L->L.name, m);
        if (pj_chk_prepare(c, L, m, n, 1, 771u + m, 0, NULL, err, sizeof err)) {
            fail_line("%s: prepare: %s", ctx, err);
            continue;
        }
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++)
                for (int s = 0; s < 4; s++)
                    for (int mb = 0; mb < 2; mb++)
                        for (int rb = 1; rb <= 4; rb *= 2)
                            for (int p = 2; p <= (k == PJ_ENG_GEMV && m <= 8 ? 3 : 2); p++) {
                                pj_eng_knobs kn;
                                memset(&kn, 0, sizeof kn);
                                kn.pipe = (uint8_t)p;
                                kn.nw = nws[i];
                                kn.u = us[j];
                                kn.ks = kss[s];
                                kn.minb = (uint8_t)mb;
                                kn.rb = (uint8_t)rb;
                                const unsigned long long before = n_checks;
                                check_one(c, ws, k, &kn, ctx);
                                if (p == 3)
                                    n3 += n_checks - before;
                            }
    }
    /* pipe = 3 is refused silently when the layer lacks its fragment-major
     * copy: insist that it ran where it should. */
    if (k == PJ_ENG_GEMV && mlist[0] <= 8 && L->L.wt && !n3)
        fail_line("streamed %s: no pipe=3 variant ran", L->L.name);
    printf("B %-7s on %-9s: %llu checks (%llu pipe=3), %llu failed (%.1f s) [pipe=2/3]\n",
           pj_eng_name(k), L->L.name, n_checks - c0, n3, n_fail - f0, now_s() - t0);
    fflush(stdout);
}

/* The balanced GEMV (pipe = 4): warps, units per batch, K panels, CTAs per
 * SM; variants the device cannot hold are refused by the engine and
 * skipped, but at least one must run per m. */
static void sweep_balanced(pj_chk_ctx *c, pj_chk_layer *L, pj_eng_ws *ws, pj_eng_kind k,
                           const uint32_t *mlist, int nm)
{
    char err[256], ctx[128];
    double t0 = now_s();
    unsigned long long f0 = n_fail, c0 = n_checks;
    static const uint8_t nws[] = {4, 8, 16}, us[] = {1, 2, 4, 8}, kss[] = {1, 2, 4};
    for (int mi = 0; mi < nm; mi++) {
        const uint32_t m = mlist[mi];
        uint32_t n = L->L.N == 8192 ? 1024 : L->L.N;
        snprintf(ctx, sizeof ctx, "balanced %s m=%u", L->L.name, m);
        if (pj_chk_prepare(c, L, m, n, 1, 577u + m, 0, NULL, err, sizeof err)) {
            fail_line("%s: prepare: %s", ctx, err);
            continue;
        }
        const unsigned long long before = n_checks;
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++)
                for (int q = 0; q < 3; q++)
                    for (int r = 1; r <= 2; r++) {
                        pj_eng_knobs kn;
                        memset(&kn, 0, sizeof kn);
                        kn.pipe = 4;
                        kn.nw = nws[i];
                        kn.u = us[j];
                        kn.ks = kss[q];
                        kn.r = (uint8_t)r;
                        check_one(c, ws, k, &kn, ctx);
                    }
        if (n_checks == before)
            fail_line("%s: no balanced variant ran", ctx);
    }
    printf("B %-7s on %-9s: %llu checks, %llu failed (%.1f s) [pipe=4]\n", pj_eng_name(k),
           L->L.name, n_checks - c0, n_fail - f0, now_s() - t0);
    fflush(stdout);
}

/* The slab GEMV (gemvz pipe = 6, m <= 8) on n rows: consumer warps, tiles
 * per warp and stage, ring stages, CTAs per SM, how x comes. With r = 2 and 16 warps two
 * CTAs do not fit on an SM, so the second half of the grid starts as the
 * first ends: a slab's tail then reaches the boundary before its
 * neighbour's head has left its part, and the head finishes (the
 * protocol's other order). At least one variant must run per m. */
static void sweep_slab(pj_chk_ctx *c, pj_chk_layer *L, pj_eng_ws *ws, uint32_t n,
                       const uint32_t *mlist, int nm)
{
    char err[256], ctx[128];
    double t0 = now_s();
    unsigned long long f0 = n_fail, c0 = n_checks;
    static const uint8_t nws[] = {8, 16}, us[] = {1, 2}, sts[] = {4, 6, 8};
    for (int mi = 0; mi < nm; mi++) {
        const uint32_t m = mlist[mi];
        snprintf(ctx, sizeof ctx, "slab %s n=%u m=%u", L->L.name, n, m);
        if (pj_chk_prepare(c, L, m, n, 1, 881u + m, 0, NULL, err, sizeof err)) {
            fail_line("%s: prepare: %s", ctx, err);
            continue;
        }
        const unsigned long long before = n_checks;
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++)
                for (int q = 0; q < 3; q++)
                    for (int r = 1; r <= 2; r++)
                        for (int x = 0; x < 3; x++) {
                            pj_eng_knobs kn;
                            memset(&kn, 0, sizeof kn);
                            kn.pipe = 6;
                            kn.nw = nws[i];
                            kn.u = us[j];
                            kn.st = sts[q];
                            kn.ks = 1;
                            kn.r = (uint8_t)r;
                            kn.xs = (uint8_t)x;
                            check_one(c, ws, PJ_ENG_GEMVZ, &kn, ctx);
                        }
        if (n_checks == before)
            fail_line("%s: no slab variant ran", ctx);
    }
    printf("B gemvz   on %-9s: %llu checks, %llu failed (%.1f s) [pipe=6, n=%u]\n", L->L.name,
           n_checks - c0, n_fail - f0, now_s() - t0, n);
    fflush(stdout);
}

/* Whether some gemvz pipe = 7 variant takes K at m: K = nw x tpw x 64
 * with nw 8 or 16 and tpw 2..4; above m = 16 the 32 tokens' x fits the
 * registers only with nw = 8 or tpw = 2 (gemvzq.cu's variants). */
static int xreg_expected(uint32_t K, uint32_t m)
{
    static const uint32_t nws[] = {8, 16};
    for (int i = 0; i < 2; i++) {
        if (K % (64u * nws[i]))
            continue;
        const uint32_t tpw = K / (64u * nws[i]);
        if (tpw >= 2 && tpw <= 4 && (m <= 16 || nws[i] == 8 || tpw == 2))
            return 1;
    }
    return 0;
}

/* gemvz pipe = 7's knobs: nw streaming warps, st ring stages, r CTAs per SM
 * (0: one per row block). */
static pj_eng_knobs xreg_knobs(int nw, int st, int r)
{
    pj_eng_knobs kn;
    memset(&kn, 0, sizeof kn);
    kn.pipe = 7;
    kn.nw = (uint8_t)nw;
    kn.u = 1;
    kn.st = (uint8_t)st;
    kn.ks = 1;
    kn.r = (uint8_t)r;
    return kn;
}

/* The z12 GEMV with x in registers (gemvz pipe = 7, m <= 32, round 40) on
 * n rows: streaming warps, ring stages, CTAs per SM. Where xreg_expected
 * says a variant exists, at least one must run; where not, every one must
 * be refused and nw=16's refusal must say why (32 tokens of x). */
static void sweep_xreg(pj_chk_ctx *c, pj_chk_layer *L, pj_eng_ws *ws, uint32_t n,
                       const uint32_t *mlist, int nm)
{
    char err[256], ctx[128];
    double t0 = now_s();
    unsigned long long f0 = n_fail, c0 = n_checks;
    static const uint8_t nws[] = {8, 16}, sts[] = {4, 6};
    for (int mi = 0; mi < nm; mi++) {
        const uint32_t m = mlist[mi];
        snprintf(ctx, sizeof ctx, "xreg %s n=%u m=%u", L->L.name, n, m);
        if (pj_chk_prepare(c, L, m, n, 1, 991u + m, 0, NULL, err, sizeof err)) {
            fail_line("%s: prepare: %s", ctx, err);
            continue;
        }
        const unsigned long long before = n_checks;
        for (int i = 0; i < 2; i++)
            for (int q = 0; q < 2; q++)
                for (int r = 0; r <= 2; r++) {
                    const pj_eng_knobs kn = xreg_knobs(nws[i], sts[q], r);
                    check_one(c, ws, PJ_ENG_GEMVZ, &kn, ctx);
                }
        const int expected = xreg_expected(L->L.K, m);
        if (expected && n_checks == before)
            fail_line("%s: no x-register variant ran", ctx);
        if (!expected) {
            n_checks++;
            if (n_checks != before + 1)
                fail_line("%s: an x-register variant ran where none should (K=%u)", ctx, L->L.K);
            const pj_eng_knobs kn = xreg_knobs(16, 4, 1);
            const pj_eng_call call = layer_call(c, &L->L, ws, m, n);
            char why[200] = "";
            if (pj_eng_can_run(PJ_ENG_GEMVZ, &kn, &call, &c->lim, why, sizeof why) == 0 ||
                (m > 16 && L->L.K % 1024 == 0 && L->L.K / 1024 > 2 &&
                 !strstr(why, "32 tokens of x")))
                fail_line("%s: nw=16 refused without the reason: '%s'", ctx, why);
        }
        {
            /* r past 2 is refused, naming the knob and its range (after
             * the checks of m and x's alignment, which these shapes pass). */
            const pj_eng_knobs kn = xreg_knobs(8, 4, 3);
            const pj_eng_call call = layer_call(c, &L->L, ws, m, n);
            char why[200] = "";
            n_checks++;
            if (pj_eng_can_run(PJ_ENG_GEMVZ, &kn, &call, &c->lim, why, sizeof why) == 0 ||
                !strstr(why, "r=3 not in"))
                fail_line("%s: r=3 not refused with its range: '%s'", ctx, why);
        }
    }
    printf("B gemvz   on %-9s: %llu checks, %llu failed (%.1f s) [pipe=7, n=%u]\n", L->L.name,
           n_checks - c0, n_fail - f0, now_s() - t0, n);
    fflush(stdout);
}

/* cuBLASLt configurations named in full (cublas lt = 1, round 38): what
 * the checker refuses and why, then configurations from the space
 * projd-bench --lt-survey searches (the heuristic's first choices and a
 * spread of the others: other tiles, cluster shapes, custom options, K
 * splits) at m = 100 and 256, each against the reference, its bits
 * equal twice. rt (may be NULL): the router, refused as hi + lo. */
/* A table of one cublas entry for layer L at m (knobs: the JSON object's
 * members), loaded through the device checker into t; counts a check.
 * 1 when it loaded, else 0 with the failure reported as what. */
static int cublas_entry_table(pj_chk_ctx *c, const pj_eng_layer *L, uint32_t m, const char *knobs,
                              pj_tune_table *t, const char *what)
{
    char js[512], err[256];
    snprintf(js, sizeof js,
             "{\"device\":\"test\",\"entries\":[{\"layer\":\"%s\",\"n\":%u,\"k\":%u,"
             "\"m\":%u,\"engine\":\"cublas\",\"knobs\":{%s}}]}",
             L->name, L->N, L->K, m, knobs);
    n_checks++;
    if (pj_tune_parse(js, strlen(js), t, pj_eng_check_entry, &c->lim, NULL, NULL, err,
                      sizeof err) == 1)
        return 1;
    fail_line("%s: %s did not load: %s", L->name, what, err);
    return 0;
}

static void lt_configurations(pj_chk_ctx *c, pj_chk_layer *L, pj_eng_ws *ws, pj_chk_layer *rt,
                              pj_eng_ws *wr)
{
    char err[256], why[256], ctx[96];
    pj_eng_knobs kn;
    memset(&kn, 0, sizeof kn);
    kn.lt = 1;
    kn.lid = 66;
    kn.ltile = 15;
    kn.lst = 35;
    if (rt) {
        pj_eng_call call = layer_call(c, &rt->L, wr, 128, rt->L.N);
        const int rc = pj_eng_can_run(PJ_ENG_CUBLAS, &kn, &call, &c->lim, why, sizeof why);
        n_checks++;
        if (rc != -EINVAL || !strstr(why, "not hi + lo"))
            fail_line("router, cublas lt=1: gave %d \"%s\", want -EINVAL naming hi + lo", rc, why);
    }
    const uint32_t n = L->L.N == 8192 ? 1024 : L->L.N;
    pj_eng_call call = layer_call(c, &L->L, ws, 128, n);
    if (rt) {
        /* The dispatcher runs a named configuration at its entry's own m
         * only; the other m routed to the entry run its algo. */
        pj_tune_table t;
        pj_eng_kind k;
        pj_eng_knobs got;
        if (cublas_entry_table(c, &L->L, 128,
                               "\"algo\":1,\"lt\":1,\"lid\":66,\"ltile\":15,\"lst\":35,"
                               "\"lcu\":2,\"lcl\":5",
                               &t, "the table of one named configuration")) {
            static const uint32_t mm[] = {128, 100, 33};
            for (int i = 0; i < 3; i++) {
                pj_eng_call cm = layer_call(c, &L->L, ws, mm[i], n);
                const int step = pj_eng_choose(&t, NULL, NULL, &cm, &c->lim, &k, &got);
                const int want_lt = mm[i] == 128;
                n_checks++;
                if (step != 1 || k != PJ_ENG_CUBLAS || got.lt != want_lt || got.algo != 1 ||
                    (!want_lt && (got.ltile || got.lid || got.lcl)))
                    fail_line("%s m=%u: the dispatcher gave step %d %s lt=%u algo=%u ltile=%u, "
                              "want the table's cublas with lt=%d algo=1",
                              L->L.name, mm[i], step, pj_eng_name(k), got.lt, got.algo, got.ltile,
                              want_lt);
            }
        }
    }
    if (!rt && L->L.N == 8192) {
        /* A configuration the loader keeps (it does not ask about rows)
         * that cuBLASLt refuses for a request's shape: round 38's unpooler
         * entry at m = 256 splits K 4 ways, which takes more than the 32 MiB
         * workspace for all 8192 rows (visit 3) and fits for the 1024 the
         * reference model's requests use. At 8192 rows the ladder goes on
         * to cuBLAS's default, refusing nothing; at 1024 the entry runs. */
        pj_tune_table t;
        pj_eng_kind k;
        pj_eng_knobs got;
        if (cublas_entry_table(c, &L->L, 256,
                               "\"algo\":4,\"lt\":1,\"lid\":66,\"ltile\":17,\"lst\":35,"
                               "\"lsk\":4,\"lcu\":4,\"lcl\":2",
                               &t, "the m = 256 split configuration")) {
            static const uint32_t rows[] = {8192, 1024};
            for (int i = 0; i < 2; i++) {
                pj_eng_call cr = layer_call(c, &L->L, ws, 256, rows[i]);
                const int step = pj_eng_choose(&t, NULL, NULL, &cr, &c->lim, &k, &got);
                const int want_table = rows[i] == 1024;
                n_checks++;
                if (k != PJ_ENG_CUBLAS || (step == 1) != want_table || got.lt != want_table)
                    fail_line("%s m=256 on %u rows: the dispatcher gave step %d %s lt=%u, want "
                              "%s",
                              L->L.name, rows[i], step, pj_eng_name(k), got.lt,
                              want_table ? "the table's configuration"
                                         : "cuBLAS's default down the ladder");
            }
        }
    }
    kn.ltile = 65535;
    int rc = pj_eng_can_run(PJ_ENG_CUBLAS, &kn, &call, &c->lim, why, sizeof why);
    n_checks++;
    if (rc != -ENOENT || !strstr(why, "cuBLASLt does not run id 66 tile 65535"))
        fail_line("%s cublas lt=1,ltile=65535: gave %d \"%s\", want -ENOENT naming it", L->L.name,
                  rc, why);
    static pj_lt_cfg cfg[3000];
    static const uint32_t mlist[] = {100, 256};
    for (int mi = 0; mi < 2; mi++) {
        const uint32_t m = mlist[mi];
        snprintf(ctx, sizeof ctx, "lt configurations %s m=%u", L->L.name, m);
        if (pj_chk_prepare(c, L, m, n, 1, 771u + m, 0, NULL, err, sizeof err)) {
            fail_line("%s: prepare: %s", ctx, err);
            continue;
        }
        call = layer_call(c, &L->L, ws, m, n);
        int nheur = 0;
        long asked = 0;
        const int nc = pj_eng_lt_space(c->es, &call, cfg, 3000, &nheur, &asked, quick ? 1 : 3);
        n_checks++;
        if (nc <= nheur) {
            fail_line("%s: the space holds %d configurations, %d of them the heuristic's", ctx, nc,
                      nheur);
            continue;
        }
        const int want = quick ? 6 : 16;
        const int step = (nc - nheur) / want > 0 ? (nc - nheur) / want : 1;
        int ran = 0;
        for (int i = 0; i < nc; i += i < 2 ? 1 : (i < nheur ? nheur - i : step)) {
            kn = pj_eng_lt_knobs(&cfg[i]);
            char ks[128];
            pj_eng_knobs_str(PJ_ENG_CUBLAS, &kn, ks, sizeof ks);
            rc = pj_eng_can_run(PJ_ENG_CUBLAS, &kn, &call, &c->lim, why, sizeof why);
            n_checks++;
            if (rc) {
                fail_line("%s cublas(%s): refused (%d: %s), though the space offered it", ctx, ks,
                          rc, why);
                continue;
            }
            check_one(c, ws, PJ_ENG_CUBLAS, &kn, ctx);
            ran++;
        }
        printf("  %s: %d of %d configurations run (%d the heuristic's; %ld asked)\n", ctx, ran, nc,
               nheur, asked);
    }
    c->cur = NULL;
}

static void part_b(pj_chk_ctx *c)
{
    char err[256];
    pj_chk_layer o, un, rt, oz;
    pj_eng_ws wo, wu, wr, wz;
    if (pj_chk_layer_make(&o, "o", 4096, 2048, PJ_FMT_Z12, 4242, err, sizeof err) ||
        pj_chk_layer_make(&oz, "o-zeros", 4096, 2048, PJ_FMT_Z12, 4545 | PJ_CHK_SEED_ZEROS, err,
                          sizeof err) ||
        pj_eng_ws_init(&oz.L, 256, c->s, &wz, err, sizeof err) ||
        pj_chk_layer_make(&un, "unpooler", 8192, 4096, PJ_FMT_Z12, 4343, err, sizeof err) ||
        pj_chk_layer_make(&rt, "router", 256, 4096, PJ_FMT_SPLIT, 4444, err, sizeof err) ||
        pj_eng_ws_init(&o.L, 256, c->s, &wo, err, sizeof err) ||
        pj_eng_ws_init(&un.L, 256, c->s, &wu, err, sizeof err) ||
        pj_eng_ws_init(&rt.L, 256, c->s, &wr, err, sizeof err)) {
        fail_line("part B layers: %s", err);
        return;
    }
    static const uint32_t mz[] = {1, 5, 8, 13, 16, 31, 32};
    static const uint32_t mzq[] = {1, 13, 32};
    static const uint8_t ks124[] = {1, 2, 4};
    static const uint8_t ks12[] = {1, 2};
    static const uint8_t ksr[] = {1, 8, 16, 64};
    static const uint32_t mg[] = {1, 8, 13, 32};
    static const uint32_t mr[] = {1, 9, 32};
    static const uint32_t mt[] = {13, 33, 100, 128, 256};
    static const uint32_t mtr[] = {64, 128, 256};
    static const uint8_t kst[] = {1, 4, 16};
    static const uint8_t kstr[] = {1, 16};
    static const uint32_t mb[] = {1, 3, 8, 9, 16, 17, 31, 32};
    sweep_balanced(c, &o, &wo, PJ_ENG_GEMVZ, mb, quick ? 3 : 8);
    sweep_balanced(c, &un, &wu, PJ_ENG_GEMVZ, mb, quick ? 2 : 4);
    sweep_balanced(c, &o, &wo, PJ_ENG_GEMV, mb, quick ? 3 : 8);
    sweep_balanced(c, &rt, &wr, PJ_ENG_ROUTER, mb, quick ? 3 : 8);
    sweep_variants(c, &o, &wo, PJ_ENG_GEMVZ, quick ? mzq : mz, quick ? 3 : 7, ks124, 3);
    {
        /* The slab GEMV: all of o, o with a last row block cut short, a
         * slice of the unpooler, and o with 5 % zeros (thousands of
         * exceptions per slab: the finish reads them from global memory). */
        static const uint32_t ms[] = {1, 8, 3, 5};
        sweep_slab(c, &o, &wo, o.L.N, ms, quick ? 2 : 4);
        sweep_slab(c, &o, &wo, 1000, ms, quick ? 2 : 3);
        sweep_slab(c, &un, &wu, 1024, ms, 2);
        sweep_slab(c, &oz, &wz, oz.L.N, ms, quick ? 1 : 2);
        /* The x-register GEMV: the same layers (o: nw 8 and 16; the
         * unpooler's K: nw 16), m on both sides of 16 tokens per tile; o
         * with 5 % zeros has blocks past the staging warp's capacity. */
        static const uint32_t mx[] = {1, 16, 17, 32, 5, 8, 9, 31};
        sweep_xreg(c, &o, &wo, o.L.N, mx, quick ? 4 : 8);
        sweep_xreg(c, &o, &wo, 1000, mx, quick ? 2 : 4);
        sweep_xreg(c, &un, &wu, 1024, mx, quick ? 2 : 8);
        sweep_xreg(c, &oz, &wz, oz.L.N, mx, quick ? 2 : 4);
    }
    sweep_variants(c, &un, &wu, PJ_ENG_GEMVZ, mzq, 3, ks12, 2);
    /* 5 % zeros: ~50 exceptions a tile and ~1600 a row block, every block
     * past both slot tables (the exception warp's fallback through
     * blk_exc on every CTA). */
    sweep_variants(c, &oz, &wz, PJ_ENG_GEMVZ, mzq, quick ? 2 : 3, ks12, 2);
    {
        /* The same layer without the derived slot table: the exception warp's
         * fallback through blk_exc. A shallow copy; the original owns the
         * memory. */
        pj_chk_layer o2 = o;
        o2.L.zx_n = o2.L.zx_rk = o2.L.zx2_rk = NULL;
        o2.L.zx_c1 = o2.L.zx_c2 = o2.L.zx2_c1 = o2.L.zx2_c2 = NULL;
        o2.L.zx_mem = NULL;
        snprintf(o2.L.name, sizeof o2.L.name, "o-noslots");
        sweep_variants(c, &o2, &wo, PJ_ENG_GEMVZ, mzq, 3, ks12, 2);
        sweep_balanced(c, &o2, &wo, PJ_ENG_GEMVZ, mb, 3);
        c->cur = NULL;

        /* Blocks heavy with exceptions (round 36: one row of unusual scale
         * in the served model): o's weights with zeros planted in three
         * rows, so that one block holds more than the slot table's 64 (its
         * entries 64.. come from the overflow table), one more than 128
         * (the fallback through blk_exc) and one just past 64. */
        {
            uint16_t *hw = malloc((size_t)4096 * 2048 * 2);
            pj_chk_layer oh;
            pj_eng_ws wh;
            int ok = hw != NULL;
            if (ok) {
                pj_chk_gen_bf16(4242, 4096, 2048, hw);
                static const uint32_t rows[3] = {100, 2000, 500}, zeros[3] = {80, 150, 56};
                for (int r = 0; r < 3; r++)
                    for (uint32_t j = 0; j < zeros[r]; j++)
                        hw[(size_t)rows[r] * 2048 + 13 * j] = 0;
                ok = pj_chk_layer_from(&oh, "o-heavy", 4096, 2048, PJ_FMT_Z12, hw, NULL, err,
                                       sizeof err) == 0;
                if (ok && pj_eng_ws_init(&oh.L, 256, c->s, &wh, err, sizeof err)) {
                    pj_chk_layer_free(&oh);
                    ok = 0;
                }
            }
            free(hw);
            if (!ok) {
                fail_line("o-heavy: %s", hw ? err : "out of host memory");
            } else {
                uint32_t most = 0, over64 = 0;
                for (uint32_t b = 0; b < oh.z.n_pad / 16; b++) {
                    const uint32_t cnt = oh.z.blk_exc[b + 1] - oh.z.blk_exc[b];
                    most = cnt > most ? cnt : most;
                    over64 += cnt > 64 && cnt <= 128;
                }
                n_checks++;
                if (most <= 128 || over64 < 2)
                    fail_line("o-heavy: blocks of 65..128 exceptions %u, most %u: the planted "
                              "rows miss their aim",
                              over64, most);
                sweep_variants(c, &oh, &wh, PJ_ENG_GEMVZ, mzq, 3, ks12, 2);
                sweep_balanced(c, &oh, &wh, PJ_ENG_GEMVZ, mb, 3);
                c->cur = NULL;
                pj_eng_ws_free(&wh);
                pj_chk_layer_free(&oh);
            }
        }

        /* Without the by-tile exception table (a layer whose entries do
         * not allow one) the z12 tiled forms refuse, saying why; the bf16
         * form of the same tile still runs. */
        pj_chk_layer o3 = o;
        o3.L.zt_off = o3.L.zt_ent = NULL;
        const pj_eng_call call = layer_call(c, &o3.L, &wo, 16, o3.L.N);
        static const uint8_t pipes[] = {3, 5, 6};
        for (int i = 0; i < 3; i++) {
            pj_eng_knobs kn;
            memset(&kn, 0, sizeof kn);
            kn.tile = 9;
            kn.ks = 4;
            kn.pipe = pipes[i];
            char why[200] = "";
            const int rc = pj_eng_can_run(PJ_ENG_SPLITK, &kn, &call, &c->lim, why, sizeof why);
            n_checks++;
            if (kn.pipe == 3 && rc)
                fail_line("o without the tile table: pipe=3 refused: %s", why);
            if (kn.pipe != 3 && (rc != -ENOTSUP || !strstr(why, "no by-tile exception table")))
                fail_line("o without the tile table: pipe=%u gave %d \"%s\", want -ENOTSUP "
                          "naming the table",
                          kn.pipe, rc, why);
        }
    }
    {
        /* The cluster forms keep a landing area for the other ranks'
         * partials (BM x BN floats) beside the ring: tile 4 (128 x 256,
         * 144 KB of ring) then no longer fits a CTA, and the checker says
         * so; the same tile without the cluster still runs. */
        const pj_eng_call call = layer_call(c, &o.L, &wo, 256, o.L.N);
        for (int cl = 0; cl < 2; cl++) {
            pj_eng_knobs kn;
            memset(&kn, 0, sizeof kn);
            kn.tile = 4;
            kn.ks = 4;
            kn.pipe = 2;
            kn.cl = (uint8_t)cl;
            char why[200] = "";
            const int rc = pj_eng_can_run(PJ_ENG_SPLITK, &kn, &call, &c->lim, why, sizeof why);
            n_checks++;
            if (!cl && rc)
                fail_line("o m=256 tile=4 ks=4 cl=0 refused: %s", why);
            if (cl && (!rc || !strstr(why, "shared memory")))
                fail_line("o m=256 tile=4 ks=4 cl=1 gave %d \"%s\", want a refusal naming "
                          "shared memory",
                          rc, why);
        }
    }
    sweep_variants(c, &o, &wo, PJ_ENG_GEMV, mg, quick ? 2 : 4, ks12, 2);
    static const uint32_t ms2[] = {1, 3, 8, 13, 17, 32};
    sweep_streamed(c, &o, &wo, PJ_ENG_GEMV, ms2, quick ? 3 : 6);
    sweep_streamed(c, &un, &wu, PJ_ENG_GEMV, ms2, 2);
    sweep_streamed(c, &rt, &wr, PJ_ENG_ROUTER, ms2, quick ? 3 : 6);
    sweep_variants(c, &rt, &wr, PJ_ENG_ROUTER, mr, quick ? 2 : 3, ksr, 4);
    sweep_variants(c, &o, &wo, PJ_ENG_SPLITK, mt, quick ? 3 : 5, kst, 3);
    {
        /* 5 % zeros: about 6,500 exceptions per 64 rows, past the z12 tiled
         * GEMM's shared-memory copy (its epilogue reads them from global
         * memory). */
        static const uint32_t mzt[] = {13, 128};
        static const uint8_t ks14[] = {1, 4};
        sweep_variants(c, &oz, &wz, PJ_ENG_SPLITK, mzt, quick ? 1 : 2, ks14, 2);
    }
    sweep_variants(c, &rt, &wr, PJ_ENG_ROUTER, mtr, quick ? 2 : 3, kstr, 2);
    {
        static const uint32_t mcb[] = {1, 13, 32, 128, 256};
        static const uint8_t ks1[] = {1};
        sweep_variants(c, &o, &wo, PJ_ENG_CUBLAS, mcb, quick ? 2 : 5, ks1, 1);
        sweep_variants(c, &un, &wu, PJ_ENG_CUBLAS, mcb, quick ? 2 : 5, ks1, 1);
        c->cur = NULL;
        /* A cuBLASLt candidate is for one bf16 matrix: the router's hi + lo
         * is refused, saying why. */
        pj_eng_call call = layer_call(c, &rt.L, &wr, 8, rt.L.N);
        pj_eng_knobs kn;
        memset(&kn, 0, sizeof kn);
        kn.algo = 2;
        char why[200] = "";
        const int rc = pj_eng_can_run(PJ_ENG_CUBLAS, &kn, &call, &c->lim, why, sizeof why);
        n_checks++;
        if (rc != -EINVAL || !strstr(why, "not hi + lo"))
            fail_line("router, cublas algo=2: gave %d \"%s\", want -EINVAL naming hi + lo", rc,
                      why);
        /* The candidates accepted for a shape are a prefix of algo 2..49;
         * each one past it is refused with -ENOENT naming how many there
         * are, and the count agrees with where the prefix ends. */
        call = layer_call(c, &o.L, &wo, 128, o.L.N);
        int first_refused = 0;
        for (int a = 2; a <= PJ_ENG_CUBLAS_MAX_ALGO; a++) {
            kn.algo = (uint8_t)a;
            why[0] = 0;
            const int ra = pj_eng_can_run(PJ_ENG_CUBLAS, &kn, &call, &c->lim, why, sizeof why);
            n_checks++;
            if (!ra && first_refused)
                fail_line("o m=128 cublas algo=%d accepted after algo=%d was refused", a,
                          first_refused);
            if (ra && !first_refused)
                first_refused = a;
            char want[64];
            snprintf(want, sizeof want, "offers %d candidates (algo 2..%d)", first_refused - 2,
                     first_refused - 1);
            if (ra && (ra != -ENOENT || !strstr(why, want)))
                fail_line("o m=128 cublas algo=%d: gave %d \"%s\", want -ENOENT saying \"%s\"", a,
                          ra, why, want);
        }
        if (first_refused == 2)
            fail_line("o m=128: cuBLASLt offered no candidate");
        lt_configurations(c, &o, &wo, &rt, &wr);
        lt_configurations(c, &un, &wu, NULL, NULL);
    }
    {
        /* K = 3072 takes 3, 6 and 12 splits, so a cluster's outputs do not
         * deal evenly to its ranks (the last piece is shorter): the push
         * reduction's rounding, which the reference shapes (ks a power of
         * two) never reach. */
        pj_chk_layer k3, r3;
        pj_eng_ws w3, wr3;
        if (pj_chk_layer_make(&k3, "k3072", 1024, 3072, PJ_FMT_Z12, 4646, err, sizeof err) ||
            pj_eng_ws_init(&k3.L, 256, c->s, &w3, err, sizeof err) ||
            pj_chk_layer_make(&r3, "rt-k3072", 256, 3072, PJ_FMT_SPLIT, 4747, err, sizeof err) ||
            pj_eng_ws_init(&r3.L, 256, c->s, &wr3, err, sizeof err)) {
            fail_line("K = 3072 layers: %s", err);
        } else {
            static const uint8_t ks3[] = {3, 6, 12};
            static const uint32_t m3[] = {1, 13, 32};
            static const uint32_t m3t[] = {13, 100, 256};
            sweep_variants(c, &k3, &w3, PJ_ENG_GEMVZ, m3, quick ? 1 : 3, ks3, 3);
            sweep_xreg(c, &k3, &w3, k3.L.N, m3, quick ? 1 : 3); /* nw 16: 3 tiles per warp */
            sweep_variants(c, &k3, &w3, PJ_ENG_GEMV, m3, quick ? 1 : 3, ks3, 3);
            sweep_variants(c, &k3, &w3, PJ_ENG_SPLITK, m3t, quick ? 1 : 3, ks3, 3);
            sweep_variants(c, &r3, &wr3, PJ_ENG_ROUTER, m3, quick ? 1 : 3, ks3, 3);
            sweep_variants(c, &r3, &wr3, PJ_ENG_ROUTER, m3t, quick ? 1 : 3, ks3, 3);
            c->cur = NULL;
            pj_eng_ws_free(&w3);
            pj_eng_ws_free(&wr3);
            pj_chk_layer_free(&k3);
            pj_chk_layer_free(&r3);
        }
    }
    {
        /* N = 1000 (not a multiple of any tile's rows): the tiled GEMMs'
         * last row tile runs past the matrix, where the copy forms repeat
         * its last row and TMA (pipe 4, 7) brings zeros. */
        pj_chk_layer odd;
        pj_eng_ws wodd;
        if (pj_chk_layer_make(&odd, "n1000", 1000, 1024, PJ_FMT_BF16, 4848, err, sizeof err)) {
            fail_line("N = 1000 layer: %s", err);
        } else if (pj_eng_ws_init(&odd.L, 256, c->s, &wodd, err, sizeof err)) {
            fail_line("N = 1000 workspace: %s", err);
            pj_chk_layer_free(&odd);
        } else {
            static const uint8_t ks12o[] = {1, 2};
            static const uint32_t modd[] = {13, 129};
            sweep_variants(c, &odd, &wodd, PJ_ENG_SPLITK, modd, quick ? 1 : 2, ks12o, 2);
            c->cur = NULL;
            pj_eng_ws_free(&wodd);
            pj_chk_layer_free(&odd);
        }
    }
    pj_eng_ws_free(&wo);
    pj_eng_ws_free(&wu);
    pj_eng_ws_free(&wr);
    pj_eng_ws_free(&wz);
    pj_chk_layer_free(&oz);
    pj_chk_layer_free(&o);
    pj_chk_layer_free(&un);
    pj_chk_layer_free(&rt);
}

/* A z12 layer without a bf16 copy (the daemon makes none when
 * shapes.max_m <= 32): cuBLAS cannot read it, so a table's cuBLAS entry
 * is refused and the ladder gives the z12 GEMV at every m it takes, not
 * only up to PJ_ENG_DEFAULT_GEMV_M; those choices match the reference.
 * (It used to find no engine at m 9..32: the daemon did not start.) */
static void part_b_z12_only(pj_chk_ctx *c)
{
    char err[256];
    pj_chk_layer zl;
    pj_eng_ws ws;
    if (pj_chk_layer_make(&zl, "zonly", 1024, 2048, PJ_FMT_Z12, 5151, err, sizeof err)) {
        fail_line("z12-only layer: %s", err);
        return;
    }
    if (pj_eng_ws_init(&zl.L, 256, c->s, &ws, err, sizeof err)) {
        fail_line("z12-only workspace: %s", err);
        pj_chk_layer_free(&zl);
        return;
    }
    pj_eng_layer view = zl.L;
    view.w = NULL;
    view.wt = NULL;
    pj_tune_table t;
    cublas_entry_table(c, &zl.L, 16, "\"algo\":0", &t, "the z12-only layer's cuBLAS entry");
    static const uint32_t ms[] = {1, 9, 16, 17, 32};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        const uint32_t m = ms[i];
        pj_eng_call call = layer_call(c, &view, &ws, m, view.N);
        pj_eng_kind k = PJ_ENG_CUBLAS;
        pj_eng_knobs kn;
        const int step = pj_eng_choose(&t, NULL, NULL, &call, &c->lim, &k, &kn);
        n_checks++;
        if (step != 2 || k != PJ_ENG_GEMVZ) {
            fail_line("z12-only m=%u: the dispatcher gave step %d %s, want the ladder's gemvz", m,
                      step, step < 0 ? "(none)" : pj_eng_name(k));
            continue;
        }
        /* gemvz reads the z12 tiles alone: run on the full layer, it is
         * the run the daemon's z12-only layer makes. */
        if (pj_chk_prepare(c, &zl, m, zl.L.N, 1, 5200 + m, 0, NULL, err, sizeof err)) {
            fail_line("z12-only m=%u: %s", m, err);
            continue;
        }
        char ctx[64];
        snprintf(ctx, sizeof ctx, "z12-only m=%u (the ladder's choice)", m);
        check_one(c, &ws, k, &kn, ctx);
    }
    printf("B z12 layer without a bf16 copy: the ladder's gemvz at m = 1..32 checked\n");
    c->cur = NULL;
    pj_eng_ws_free(&ws);
    pj_chk_layer_free(&zl);
}

static int n_msgs;
static void count_msg(void *ctx, const char *msg)
{
    (void)ctx;
    printf("  (expected) %s\n", msg);
    n_msgs++;
}

static char new_msgs[8][320];
static int n_new_msgs;
static void keep_msg(void *ctx, const char *msg)
{
    (void)ctx;
    printf("  (expected) %s\n", msg);
    if (n_new_msgs < 8)
        snprintf(new_msgs[n_new_msgs], sizeof new_msgs[0], "%s", msg);
    n_new_msgs++;
}

/* Load table text js through the device checker: nkeep entries must be
 * kept and the rest refused, message i containing want[i], in order. */
static void expect_table(pj_chk_ctx *c, const char *what, const char *js, int nkeep,
                         const char *const *want, int nwant)
{
    pj_tune_table t;
    char err[256];
    n_new_msgs = 0;
    int n = pj_tune_parse(js, strlen(js), &t, pj_eng_check_entry, &c->lim, keep_msg, NULL, err,
                          sizeof err);
    n_checks++;
    if (n != nkeep || n_new_msgs != nwant)
        fail_line("table loader, %s: kept %d (want %d), rejected %d (want %d)%s%s", what, n, nkeep,
                  n_new_msgs, nwant, n < 0 ? ": " : "", n < 0 ? err : "");
    for (int i = 0; i < nwant && i < n_new_msgs; i++) {
        n_checks++;
        if (!strstr(new_msgs[i], want[i]))
            fail_line("table loader, %s: message %d is \"%s\", want \"%s\"", what, i, new_msgs[i],
                      want[i]);
    }
    printf("C table loader, %s: %d kept, %d rejected\n", what, n, n_new_msgs);
}

/* The knobs of rounds 5-7 (pipe 4/5, xs 2, rb 4, cl) misused: each entry is
 * refused with its own reason; two valid entries with them are kept. */
static void part_c_new_knobs(pj_chk_ctx *c)
{
    const char *js = "{\"device\":\"test\",\"entries\":["
                     "{\"layer\":\"router\",\"n\":256,\"k\":4096,\"m\":1,\"engine\":\"router\","
                     "\"knobs\":{\"nw\":8,\"ks\":8,\"u\":2,\"pipe\":0,\"cl\":1}},"
                     "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":8,\"engine\":\"gemvz\","
                     "\"knobs\":{\"nw\":4,\"ks\":1,\"u\":1,\"pipe\":5,\"xs\":2,\"r\":1}},"
                     "{\"layer\":\"router\",\"n\":256,\"k\":4096,\"m\":2,\"engine\":\"router\","
                     "\"knobs\":{\"nw\":8,\"ks\":1,\"u\":2,\"pipe\":0,\"cl\":1}},"
                     "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":4,\"engine\":\"gemvz\","
                     "\"knobs\":{\"nw\":4,\"ks\":1,\"u\":1,\"pipe\":0,\"xs\":2,\"r\":1}},"
                     "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":16,\"engine\":\"gemvz\","
                     "\"knobs\":{\"nw\":4,\"ks\":1,\"u\":1,\"pipe\":1,\"xs\":0,\"r\":1,\"rb\":4}},"
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":1,\"engine\":\"gemv\","
                     "\"knobs\":{\"nw\":8,\"ks\":3,\"u\":1,\"pipe\":4,\"r\":1}},"
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":2,\"engine\":\"gemv\","
                     "\"knobs\":{\"nw\":8,\"ks\":1,\"u\":4,\"pipe\":0,\"r\":2}}]}";
    static const char *const want[] = {
        "cl=1 needs ks in 2..16, pipe 0 or 1 and rb=1",
        "xs=2 (x through the prefetch ring) needs pipe=5",
        "rb=4 not in {1, 2} (4 with pipe=5)",
        "pipe=4: ks (K panels) 3 not in {1, 2, 4}",
        "r=2 is a knob of pipe=4 only",
    };
    expect_table(c, "new knobs", js, 2, want, (int)(sizeof want / sizeof want[0]));
}

/* gemvz's knobs of round 10 (xs = 3, ts) misused: each entry is refused
 * with its own reason; two valid entries with them are kept. */
static void part_c_gemvz_r10(pj_chk_ctx *c)
{
    const char *js =
        "{\"device\":\"test\",\"entries\":["
        "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":1,\"engine\":\"gemvz\","
        "\"knobs\":{\"nw\":8,\"ks\":1,\"u\":1,\"pipe\":5,\"xs\":3,\"r\":1}},"
        "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":2,\"engine\":\"gemvz\","
        "\"knobs\":{\"nw\":4,\"ks\":1,\"u\":2,\"pipe\":5,\"xs\":0,\"r\":1,\"ts\":4}},"
        "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":16,\"engine\":\"gemvz\","
        "\"knobs\":{\"nw\":8,\"ks\":1,\"u\":1,\"pipe\":5,\"xs\":3,\"r\":1}},"
        "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":4,\"engine\":\"gemvz\","
        "\"knobs\":{\"nw\":4,\"ks\":2,\"u\":1,\"pipe\":5,\"xs\":0,\"r\":1,\"ts\":4}},"
        "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":3,\"engine\":\"gemvz\","
        "\"knobs\":{\"nw\":16,\"ks\":1,\"u\":1,\"pipe\":5,\"xs\":0,\"r\":1,\"ts\":2}}]}";
    static const char *const want[] = {
        "xs=3 (the m tokens staged) needs pipe=5, m <= 8, nw 4 or 8 and rb=1",
        "ts=4 (tail split) needs ks=1 and cl=0",
        "ts=2 (tail split) has variants for pipe=5, rb=1, nw 4 or 8",
    };
    expect_table(c, "round 10 knobs", js, 2, want, (int)(sizeof want / sizeof want[0]));
}

/* gemvz's x shared by the CTA (xs = 4, round 11) misused: each entry is
 * refused with its own reason; two valid entries with it are kept. */
static void part_c_gemvz_r11(pj_chk_ctx *c)
{
    const char *js = "{\"device\":\"test\",\"entries\":["
                     "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":16,\"engine\":\"gemvz\","
                     "\"knobs\":{\"nw\":2,\"ks\":1,\"u\":1,\"pipe\":5,\"xs\":4,\"r\":4}},"
                     "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":32,\"engine\":\"gemvz\","
                     "\"knobs\":{\"nw\":1,\"ks\":4,\"u\":2,\"pipe\":5,\"xs\":4,\"r\":4,\"cl\":1}},"
                     "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":17,\"engine\":\"gemvz\","
                     "\"knobs\":{\"nw\":8,\"ks\":1,\"u\":1,\"pipe\":5,\"xs\":4,\"r\":1}},"
                     "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":18,\"engine\":\"gemvz\","
                     "\"knobs\":{\"nw\":2,\"ks\":1,\"u\":1,\"pipe\":5,\"xs\":2,\"r\":2}},"
                     "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":19,\"engine\":\"gemvz\","
                     "\"knobs\":{\"nw\":1,\"ks\":1,\"u\":1,\"pipe\":5,\"xs\":5,\"r\":2}}]}";
    static const char *const want[] = {
        "xs=4 (x shared by the CTA) needs pipe=5, nw 1, 2 or 4, u 1 or 2 and no ts",
        "nw=2 not in {4, 8, 16} (1 and 2 only with xs=4)",
        "knob xs must be an integer in 0..4",
    };
    expect_table(c, "round 11 knobs", js, 2, want, (int)(sizeof want / sizeof want[0]));
}

/* gemvz's ring stages (st, round 12) misused: each entry is refused with
 * its own reason; two valid entries with it are kept. */
static void part_c_gemvz_r12(pj_chk_ctx *c)
{
    const char *js =
        "{\"device\":\"test\",\"entries\":["
        "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":16,\"engine\":\"gemvz\","
        "\"knobs\":{\"nw\":8,\"ks\":1,\"u\":1,\"pipe\":5,\"xs\":2,\"r\":1,\"rb\":2,\"st\":2}},"
        "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":32,\"engine\":\"gemvz\","
        "\"knobs\":{\"nw\":4,\"ks\":1,\"u\":1,\"pipe\":5,\"xs\":2,\"r\":1,\"st\":4}},"
        "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":8,\"engine\":\"gemvz\","
        "\"knobs\":{\"nw\":4,\"ks\":1,\"u\":1,\"pipe\":5,\"xs\":2,\"r\":1,\"st\":2}},"
        "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":20,\"engine\":\"gemvz\","
        "\"knobs\":{\"nw\":4,\"ks\":1,\"u\":1,\"pipe\":5,\"xs\":2,\"r\":1,\"st\":3}},"
        "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":24,\"engine\":\"gemvz\","
        "\"knobs\":{\"nw\":4,\"ks\":1,\"u\":1,\"pipe\":5,\"xs\":2,\"r\":1,\"st\":9}}]}";
    static const char *const want[] = {
        "st=2 (ring stages) has variants for pipe=5, xs=2, m > 8, nw 4 or 8, u 1 or 2, rb 1 or 2, "
        "no cl or ts",
        "st=3 (ring stages) not in {2, 4}",
        "knob st must be an integer in 0..8",
    };
    expect_table(c, "round 12 knobs", js, 2, want, (int)(sizeof want / sizeof want[0]));
}

/* The slab GEMV (gemvz pipe = 6, round 18) misused: each entry is refused
 * with its own reason; two valid entries with it are kept. */
static void part_c_gemvz_r18(pj_chk_ctx *c)
{
    const char *js = "{\"device\":\"test\",\"entries\":["
                     "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":1,\"engine\":\"gemvz\","
                     "\"knobs\":{\"nw\":16,\"ks\":1,\"u\":1,\"pipe\":6,\"r\":1,\"st\":4}},"
                     "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":8,\"engine\":\"gemvz\","
                     "\"knobs\":{\"nw\":8,\"ks\":1,\"u\":1,\"pipe\":6,\"r\":2,\"st\":4}},"
                     "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":16,\"engine\":\"gemvz\","
                     "\"knobs\":{\"nw\":8,\"ks\":1,\"u\":1,\"pipe\":6,\"r\":1,\"st\":4}},"
                     "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":2,\"engine\":\"gemvz\","
                     "\"knobs\":{\"nw\":4,\"ks\":1,\"u\":1,\"pipe\":6,\"r\":1,\"st\":4}},"
                     "{\"layer\":\"qkv\",\"n\":4608,\"k\":4096,\"m\":3,\"engine\":\"gemvz\","
                     "\"knobs\":{\"nw\":8,\"ks\":1,\"u\":1,\"pipe\":6,\"r\":1,\"st\":5}}]}";
    static const char *const want[] = {
        "pipe=6: m=16 > 8",
        "pipe=6: nw=4 (consumer warps) not in {8, 16}",
        "pipe=6: st=5 (ring stages) not in {4, 6, 8}",
    };
    expect_table(c, "round 18 knobs", js, 2, want, (int)(sizeof want / sizeof want[0]));
}

/* cuBLASLt's candidates (cublas algo >= 2, round 12): one in range is
 * kept, one past the knob's range refused. */
static void part_c_cublas_r12(pj_chk_ctx *c)
{
    const char *js = "{\"device\":\"test\",\"entries\":["
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":128,\"engine\":\"cublas\","
                     "\"knobs\":{\"algo\":2}},"
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":256,\"engine\":\"cublas\","
                     "\"knobs\":{\"algo\":50}}]}";
    static const char *const want[] = {"knob algo must be an integer in 0..49"};
    expect_table(c, "cuBLASLt candidates", js, 1, want, 1);
}

/* Explicit cuBLASLt configurations (lt = 1, round 38) at load: the
 * unpooler's m = 256 entry is kept although cuBLASLt would refuse it for all
 * 8192 rows (its requests use 1024; the shape is asked per request), and
 * each entry this cuBLAS cannot have is refused with its own reason. An
 * algo of 2 or more beside lt = 1 never runs (the entry's own m runs the
 * configuration, the other m algo 0: pj_tune_entry_knobs), so m = 130's
 * algo 49 is no reason to refuse it. */
static void part_c_cublas_r38(pj_chk_ctx *c)
{
    const char *js =
        "{\"device\":\"test\",\"entries\":["
        "{\"layer\":\"unpooler\",\"n\":8192,\"k\":4096,\"m\":256,\"engine\":\"cublas\","
        "\"knobs\":{\"lt\":1,\"lid\":66,\"ltile\":17,\"lst\":35,\"lsk\":4,\"lcu\":4,\"lcl\":2}},"
        "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":128,\"engine\":\"cublas\","
        "\"knobs\":{\"lt\":1,\"lid\":66,\"ltile\":65535,\"lst\":35}},"
        "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":129,\"engine\":\"cublas\","
        "\"knobs\":{\"lt\":1,\"lid\":250,\"ltile\":15,\"lst\":35}},"
        "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":130,\"engine\":\"cublas\","
        "\"knobs\":{\"algo\":49,\"lt\":1,\"lid\":66,\"ltile\":15,\"lst\":35}},"
        "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":131,\"engine\":\"cublas\","
        "\"knobs\":{\"lt\":1,\"lid\":66,\"ltile\":15,\"lst\":35,\"lcu\":255}},"
        "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":132,\"engine\":\"cublas\","
        "\"knobs\":{\"lt\":1,\"lid\":66,\"ltile\":15,\"lst\":35,\"lsk\":17}}]}";
    static const char *const want[] = {
        "tile 65535 is not one of algorithm 66's", "has no algorithm id 250",
        "custom option 255 is past algorithm 66's", "knob lsk must be an integer in 0..16"};
    expect_table(c, "cuBLASLt configurations", js, 2, want, 4);
}

/* The tiled GEMM's knobs of rounds 8-9 and 20 (cl, pipe 1-7, tiles 6-9)
 * misused: each entry is refused with its own reason; five valid entries
 * are kept. */
static void part_c_tiled_knobs(pj_chk_ctx *c)
{
    const char *js = "{\"device\":\"test\",\"entries\":["
                     "{\"layer\":\"router\",\"n\":256,\"k\":4096,\"m\":128,\"engine\":\"router\","
                     "\"knobs\":{\"tile\":3,\"ks\":1,\"cl\":1}},"
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":128,\"engine\":\"splitk\","
                     "\"knobs\":{\"tile\":6,\"ks\":2,\"pipe\":3,\"cl\":1}},"
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":256,\"engine\":\"splitk\","
                     "\"knobs\":{\"tile\":0,\"ks\":4,\"pipe\":5}},"
                     "{\"layer\":\"router\",\"n\":256,\"k\":4096,\"m\":127,\"engine\":\"router\","
                     "\"knobs\":{\"tile\":6,\"ks\":4,\"pipe\":5}},"
                     "{\"layer\":\"pooler\",\"n\":8192,\"k\":4096,\"m\":16,\"engine\":\"splitk\","
                     "\"knobs\":{\"tile\":9,\"ks\":4,\"pipe\":5,\"cl\":1}},"
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":64,\"engine\":\"splitk\","
                     "\"knobs\":{\"tile\":5,\"ks\":2,\"pipe\":2}},"
                     "{\"layer\":\"router\",\"n\":256,\"k\":4096,\"m\":256,\"engine\":\"router\","
                     "\"knobs\":{\"tile\":6,\"ks\":4,\"pipe\":3,\"cl\":1}},"
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":32,\"engine\":\"splitk\","
                     "\"knobs\":{\"tile\":8,\"ks\":32,\"cl\":1}},"
                     "{\"layer\":\"pooler\",\"n\":8192,\"k\":4096,\"m\":32,\"engine\":\"splitk\","
                     "\"knobs\":{\"tile\":1,\"ks\":2,\"pipe\":6}},"
                     "{\"layer\":\"pooler\",\"n\":8192,\"k\":4096,\"m\":64,\"engine\":\"splitk\","
                     "\"knobs\":{\"tile\":9,\"ks\":4,\"pipe\":6,\"cl\":1}},"
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":192,\"engine\":\"splitk\","
                     "\"knobs\":{\"tile\":1,\"ks\":2,\"pipe\":7,\"cl\":1}},"
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":224,\"engine\":\"splitk\","
                     "\"knobs\":{\"tile\":4,\"ks\":2,\"pipe\":7,\"cl\":1}}]}";
    /* Round 20's pipe = 7: a good entry kept; tile 4 (128 x 256) with the
     * cluster's landing area leaves no room for a ring of two slots. The
     * router's pipe = 5 entry is at m = 127: at 128 it would be a copy of
     * entries[0], refused as that whatever its knobs. */
    static const char *const want[] = {
        "cl=1 needs ks in 2..16 (the cluster size)",
        "tile=0 has no pipe=5 form",
        "pipe=5: layer has no z12 weights",
        "tile=5 has no pipe=2 form",
        "cl=1 needs ks in 2..16 (the cluster size)",
        "tile=1 has no pipe=6 form",
        "pipe=7: tile=4 leaves no room for a ring of two slots beside the cluster's",
    };
    expect_table(c, "tiled knobs", js, 5, want, (int)(sizeof want / sizeof want[0]));
}

static void part_c(pj_chk_ctx *c)
{
    /* Three good entries, then: a tgemm tile that needs more shared memory
     * than the device gives (a fake small limit), a gemvz whose K split
     * does not divide, a knob the engine lacks, a gemv with a variant that
     * spills heavily. */
    const char *js = "{\"device\":\"test\",\"entries\":["
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":1,\"engine\":\"gemvz\","
                     "\"knobs\":{\"nw\":8,\"ks\":1,\"u\":1,\"pipe\":1,\"xs\":1,\"r\":1}},"
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":8,\"engine\":\"gemv\","
                     "\"knobs\":{\"nw\":8,\"ks\":1,\"u\":2,\"pipe\":1,\"minb\":0}},"
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":128,\"engine\":\"cublas\","
                     "\"knobs\":{\"algo\":1}},"
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":256,\"engine\":\"splitk\","
                     "\"knobs\":{\"tile\":4,\"ks\":1}},"
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":16,\"engine\":\"gemvz\","
                     "\"knobs\":{\"nw\":16,\"ks\":3,\"u\":1,\"pipe\":0,\"xs\":0,\"r\":1}},"
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":32,\"engine\":\"gemv\","
                     "\"knobs\":{\"xs\":1}},"
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":2,\"engine\":\"gemv\","
                     "\"knobs\":{\"nw\":8,\"ks\":1,\"u\":8,\"pipe\":1,\"minb\":1}}]}";
    pj_dev_limits small = c->lim;
    small.smem_per_block_optin = 100 * 1024; /* tile 4 needs ~147 KiB */
    pj_tune_table t;
    char err[256];
    n_msgs = 0;
    int n = pj_tune_parse(js, strlen(js), &t, pj_eng_check_entry, &small, count_msg, NULL, err,
                          sizeof err);
    n_checks++;
    if (n != 3 || n_msgs != 4)
        fail_line("table loader: kept %d (want 3), rejected %d (want 4)%s%s", n, n_msgs,
                  n < 0 ? ": " : "", n < 0 ? err : "");
    /* Routing: m = 5 takes the m = 8 entry; m = 200 takes the largest. */
    const pj_tune_entry *e5 = pj_dispatch_choose(&t, "o", 4096, 2048, 5);
    const pj_tune_entry *e200 = pj_dispatch_choose(&t, "o", 4096, 2048, 200);
    n_checks++;
    if (!e5 || e5->m != 8 || !e200 || e200->m != 128)
        fail_line("dispatch routing: m=5 -> %d, m=200 -> %d (want 8, 128)", e5 ? (int)e5->m : -1,
                  e200 ? (int)e200->m : -1);
    printf("C table loader: %d kept, %d rejected\n", n, n_msgs);
    part_c_new_knobs(c);
    part_c_tiled_knobs(c);
    part_c_gemvz_r10(c);
    part_c_gemvz_r11(c);
    part_c_gemvz_r12(c);
    part_c_gemvz_r18(c);
    part_c_cublas_r12(c);
    part_c_cublas_r38(c);
}

/* Negative controls: the comparison must catch a wrong value, an unwritten
 * output and a NaN, or every other verdict here means nothing. */
static void part_0(pj_chk_ctx *c)
{
    char err[256];
    pj_chk_layer L;
    pj_eng_ws ws;
    if (pj_chk_layer_make(&L, "o", 4096, 2048, PJ_FMT_BF16, 99, err, sizeof err) ||
        pj_eng_ws_init(&L.L, 256, c->s, &ws, err, sizeof err)) {
        fail_line("part 0 layer: %s", err);
        return;
    }
    const uint32_t m = 3, n = 4096;
    if (pj_chk_prepare(c, &L, m, n, 0, 5, 4, NULL, err, sizeof err)) {
        fail_line("part 0 prepare: %s", err);
        return;
    }
    pj_eng_knobs kn = pj_eng_default_knobs(PJ_ENG_CUBLAS, &L.L, m);
    pj_chk_result res;
    n_checks++;
    if (pj_chk_run(c, &ws, PJ_ENG_CUBLAS, &kn, &res) || !res.ok)
        fail_line("part 0: cuBLAS itself fails the check: %s", res.why);
    /* y now holds cuBLAS's output: spoil three values and compare again. */
    uint16_t *h = c->hy;
    cudaMemcpy(h, c->dy, (size_t)m * n * 2, cudaMemcpyDeviceToHost);
    h[17] ^= 0x0040;         /* a mantissa bit well above the bound */
    h[n + 5] = PJ_BK_POISON; /* "unwritten" */
    h[2 * n + 9] = 0x7fc0;   /* NaN */
    cudaMemcpy(c->dy, h, (size_t)m * n * 2, cudaMemcpyHostToDevice);
    pj_bk_cmp cmp;
    n_checks++;
    if (pj_bk_compare(c->s, c->dy, n, m, n, c->dref, c->dsabs, c->dcmp, &cmp) || cmp.bad != 2 ||
        cmp.unwritten != 1)
        fail_line("part 0: comparison missed planted errors (bad %llu, want 2; unwritten %llu, "
                  "want 1)",
                  cmp.bad, cmp.unwritten);
    printf("0 negative controls: bad %llu, unwritten %llu (want 2, 1)\n", cmp.bad, cmp.unwritten);
    c->cur = NULL;
    pj_eng_ws_free(&ws);
    pj_chk_layer_free(&L);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else {
            fprintf(stderr, "usage: test_engines [--quick]\n");
            return 2;
        }
    }
    char err[256];
    pj_chk_ctx c;
    /* No device: skipped (77). A device on which the checker cannot set
     * up (its buffers, its stream) is a failure, not a skip. */
    pj_dev_limits lim;
    if (pj_eng_dev_limits(&lim, err, sizeof err)) {
        printf("no usable GPU: %s\n", err);
        return 77;
    }
    if (pj_chk_ctx_init(&c, 256, 8192, 4096, err, sizeof err)) {
        printf("FAIL: the checker's set-up on %s: %s\n", lim.name, err);
        return 1;
    }
    printf("device %s (%d SMs)%s\n", c.lim.name, c.lim.sm_count, quick ? ", quick sweep" : "");
    static pj_tune_table table;
    const pj_tune_table *tp = NULL;
    const char *tpath = getenv("PJ_TUNE_TABLE");
    if (tpath && tpath[0]) {
        int n = pj_tune_load(tpath, &table, pj_eng_check_entry, &c.lim, count_msg, NULL, err,
                             sizeof err);
        if (n < 0) { /* part A would run without it and pass for the wrong table */
            printf("FAIL: table %s (PJ_TUNE_TABLE) not loaded: %s\n", tpath, err);
            n_fail++;
        } else {
            printf("table %s: %d entries\n", tpath, n);
            tp = &table;
        }
    }
    double t0 = now_s();
    part_0(&c);
    part_c(&c);
    part_b(&c);
    part_b_z12_only(&c);
    part_a(&c, tp);
    printf("test_engines: %llu checks, %llu failed, %.1f s\n", n_checks, n_fail, now_s() - t0);
    pj_chk_ctx_free(&c);
    return n_fail ? 1 : 0;
}
