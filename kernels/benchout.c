/* benchout.c — projd-bench's score and result files (benchout.h). */
#define _POSIX_C_SOURCE 200809L
#include "kernels/benchout.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

static const char *const result_names[] = {"bench.json", "bench.md", "samples.csv", "speedups.dat"};

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

float pj_bo_median(const float *v, int n, float *scratch)
{
    memcpy(scratch, v, (size_t)n * sizeof *v);
    qsort(scratch, (size_t)n, sizeof *scratch, cmp_f);
    return n % 2 ? scratch[n / 2] : 0.5f * (scratch[n / 2 - 1] + scratch[n / 2]);
}

static double geo(const double *v, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += log(v[i]);
    return exp(s / n);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int pj_bo_score_run(const pj_bo_run *run, const pj_bo_shape *sh, int boots, uint64_t seed,
                    pj_bo_score *sc)
{
    const int nl = run->nl, nm = run->nm, reps = run->reps;
    if (nl < 1 || nm < 1 || nm > PJ_BO_MAX_LOADS || reps < 1 || boots < 40 || !seed)
        return -EINVAL;
    for (int mi = 0; mi < nm; mi++) {
        sc->base_sum[mi] = sc->ours_sum[mi] = 0;
        for (int li = 0; li < nl; li++) {
            sc->base_sum[mi] += sh[mi * nl + li].base_us;
            sc->ours_sum[mi] += sh[mi * nl + li].ours_us;
        }
        sc->speedup[mi] = sc->base_sum[mi] / sc->ours_sum[mi];
    }
    sc->score = geo(sc->speedup, nm);
    double *bs = malloc(sizeof(double) * (size_t)boots);
    float *rb = malloc(sizeof(float) * (size_t)reps * 3);
    if (!bs || !rb) {
        free(bs);
        free(rb);
        return -ENOMEM;
    }
    float *ro = rb + reps, *scr = ro + reps;
    uint64_t st = seed;
    for (int it = 0; it < boots; it++) {
        double base[PJ_BO_MAX_LOADS] = {0}, ours[PJ_BO_MAX_LOADS] = {0}, sp[PJ_BO_MAX_LOADS];
        for (int si = 0; si < nl * nm; si++) {
            for (int r = 0; r < reps; r++) {
                st ^= st << 13;
                st ^= st >> 7;
                st ^= st << 17;
                const int j = (int)(st % (uint64_t)reps);
                rb[r] = sh[si].tb[j];
                ro[r] = sh[si].to[j];
            }
            base[si / nl] += pj_bo_median(rb, reps, scr);
            ours[si / nl] += pj_bo_median(ro, reps, scr);
        }
        for (int mi = 0; mi < nm; mi++)
            sp[mi] = base[mi] / ours[mi];
        bs[it] = geo(sp, nm);
    }
    qsort(bs, (size_t)boots, sizeof *bs, cmp_d);
    /* The 2.5th and 97.5th percentiles: as many resamples below lo as above hi. */
    const int cut = (int)(0.025 * boots);
    sc->lo = bs[cut];
    sc->hi = bs[boots - 1 - cut];
    free(bs);
    free(rb);
    return 0;
}

void pj_bo_load_name(const pj_bo_run *run, int mi, char *out, size_t len)
{
    const uint32_t m = run->m[mi];
    if (run->own_model)
        snprintf(out, len, "m %u", m);
    else
        snprintf(out, len, "%s %u", m <= 32 ? "decode" : "verify", m);
}

static void say(char *err, size_t errlen, const char *dir, const char *name, const char *step,
                int e)
{
    snprintf(err, errlen, "%s/%s: %s: %s", dir, name, step, strerror(e));
}

int pj_bo_clear(int dirfd, const char *dir, char *err, size_t errlen)
{
    for (size_t i = 0; i < sizeof result_names / sizeof result_names[0]; i++)
        if (unlinkat(dirfd, result_names[i], 0) != 0 && errno != ENOENT) {
            const int e = errno;
            say(err, errlen, dir, result_names[i], "cannot remove an earlier run's file", e);
            return -e;
        }
    return 0;
}

/* A file of the folder being written: name.tmp.<pid> until committed. */
typedef struct out_file {
    FILE *f;
    int dirfd;
    const char *dir, *name;
    char tmp[96];
} out_file;

static int out_open(out_file *o, int dirfd, const char *dir, const char *name, char *err,
                    size_t errlen)
{
    o->dirfd = dirfd;
    o->dir = dir;
    o->name = name;
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld", name, (long)getpid());
    /* Never through a symbolic link: another user's link left in the
     * folder could name a file of root's. */
    int fd = openat(dirfd, o->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    o->f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (o->f)
        return 0;
    const int e = errno;
    if (fd >= 0) {
        close(fd);
        unlinkat(dirfd, o->tmp, 0);
    }
    say(err, errlen, dir, o->tmp, "cannot create", e);
    return -e;
}

/* Closes the temporary and renames it over the target; on any failure the
 * temporary goes and the target is as it was. */
static int out_commit(out_file *o, char *err, size_t errlen)
{
    int e = 0;
    const char *step = "";
    /* A write that failed earlier left only the stream's error flag; its
     * errno is long gone (then: EIO). */
    errno = 0;
    if (fflush(o->f) != 0 || ferror(o->f)) {
        e = errno ? errno : EIO;
        step = "cannot write";
    }
    if (fclose(o->f) != 0 && !e) {
        e = errno;
        step = "cannot close";
    }
    o->f = NULL;
    if (!e && renameat(o->dirfd, o->tmp, o->dirfd, o->name) != 0) {
        e = errno;
        step = "cannot rename its temporary over it";
    }
    if (!e)
        return 0;
    unlinkat(o->dirfd, o->tmp, 0);
    say(err, errlen, o->dir, o->name, step, e);
    return -e;
}

static const char *const flush_what[5] = {
    "a read through the read-only path (leaves earlier bulk and cp.async data in L2)",
    "a read with plain loads", "a read by bulk copies", "two reads (read-only path, bulk)",
    "a memset"};

static const char *flush_text(int kind)
{
    return kind >= 0 && kind < 5 ? flush_what[kind] : "?";
}

static const char *timing_text(const pj_bo_run *run)
{
    /* Without events inside the graphs each time also holds a launch
     * (2-3 us on both sides, every speedup pulled towards 1). */
    return run->ingraph ? "events inside the graph" : "events around the launch";
}

static double speedup_of(const pj_bo_shape *s)
{
    return s->base_us / s->ours_us;
}

static void add_opt_string(cJSON *o, const char *key, const char *v)
{
    if (v)
        cJSON_AddStringToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

static cJSON *run_json(const pj_bo_run *run, const pj_bo_shape *sh, const pj_bo_score *sc)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "device", run->device);
    cJSON_AddNumberToObject(root, "sm_count", run->sm_count);
    cJSON_AddStringToObject(root, "date", run->date);
    cJSON_AddStringToObject(root, "commit", run->commit ? run->commit : "");
    cJSON_AddStringToObject(root, "table", run->table ? run->table : "");
    add_opt_string(root, "config", run->config);
    cJSON_AddNumberToObject(root, "seed", (double)run->seed);
    cJSON_AddNumberToObject(root, "cuda_driver", run->cuda_driver);
    cJSON_AddNumberToObject(root, "cuda_runtime", run->cuda_runtime);
    cJSON_AddNumberToObject(root, "cublas_version", run->cublas_version);
    cJSON_AddNumberToObject(root, "reps", run->reps);
    cJSON_AddBoolToObject(root, "primed", run->primed);
    cJSON_AddNumberToObject(root, "flush_kind", run->flush_kind);
    if (run->flush_carveout >= 0)
        cJSON_AddNumberToObject(root, "flush_carveout", run->flush_carveout);
    else
        cJSON_AddNullToObject(root, "flush_carveout");
    cJSON_AddStringToObject(root, "timing", timing_text(run));
    char method[768];
    snprintf(method, sizeof method,
             "CUDA graph replay; %s256 MB flush before every timed replay (%s); ours and "
             "baseline alternate in pairs; medians; baseline = faster of cublasGemmEx default and "
             "cublasLt heuristic (router: hi + lo GEMMs + add); floor = fastest read kernel over "
             "the engine's bytes, same method",
             run->primed ? "primed: every timed op runs once untimed first; " : "",
             flush_text(run->flush_kind));
    cJSON_AddStringToObject(root, "method", method);
    cJSON *shapes = cJSON_AddArrayToObject(root, "shapes");
    for (int si = 0; si < run->nl * run->nm; si++) {
        const pj_bo_shape *s = &sh[si];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "layer", s->layer);
        cJSON_AddNumberToObject(o, "m", s->m);
        cJSON_AddNumberToObject(o, "n", s->n);
        cJSON_AddNumberToObject(o, "k", s->k);
        cJSON_AddStringToObject(o, "engine", s->engine);
        cJSON_AddStringToObject(o, "knobs", s->knobs);
        cJSON_AddNumberToObject(o, "ladder_step", s->step);
        cJSON_AddStringToObject(o, "chosen_engine", s->chosen);
        cJSON_AddBoolToObject(o, "chosen_engine_valid", s->valid);
        if (!s->valid)
            cJSON_AddStringToObject(o, "invalid_reason", s->why);
        cJSON_AddNumberToObject(o, "base_us", s->base_us);
        cJSON_AddStringToObject(o, "base_path", s->base_lt ? "cublasLt" : "cublasGemmEx");
        /* lt_us timed cublasGemmEx's default when cuBLASLt had no plan. */
        cJSON_AddBoolToObject(o, "lt_plan", s->lt_plan);
        cJSON_AddNumberToObject(o, "gemmex_us", s->gemmex_us);
        cJSON_AddNumberToObject(o, "lt_us", s->lt_us);
        cJSON_AddNumberToObject(o, "ours_us", s->ours_us);
        cJSON_AddNumberToObject(o, "speedup", speedup_of(s));
        cJSON_AddNumberToObject(o, "bytes_read", (double)s->bytes);
        cJSON_AddNumberToObject(o, "floor_us", s->floor_us);
        cJSON_AddNumberToObject(o, "ours_over_floor", s->ours_us / s->floor_us);
        /* The read's own rate over these bytes, its fixed cost included:
         * not the device's bandwidth (small reads show far less). */
        cJSON_AddNumberToObject(o, "floor_tbps", (double)s->bytes / (s->floor_us * 1e-6) / 1e12);
        cJSON *fv = cJSON_AddArrayToObject(o, "floor_variants_us");
        for (int v = 0; v < PJ_BO_FLOORS; v++)
            cJSON_AddItemToArray(fv, cJSON_CreateNumber(s->floor_var[v]));
        cJSON_AddNumberToObject(o, "rel_err", s->rel_err);
        cJSON_AddBoolToObject(o, "correct_after_replays", s->after_ok);
        if (!s->after_ok)
            cJSON_AddStringToObject(o, "after_replays_reason", s->after_why);
        cJSON_AddItemToArray(shapes, o);
    }
    cJSON *loads = cJSON_AddArrayToObject(root, "loads");
    for (int mi = 0; mi < run->nm; mi++) {
        char name[32];
        pj_bo_load_name(run, mi, name, sizeof name);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "load", name);
        cJSON_AddNumberToObject(o, "m", run->m[mi]);
        cJSON_AddNumberToObject(o, "base_us", sc->base_sum[mi]);
        cJSON_AddNumberToObject(o, "ours_us", sc->ours_sum[mi]);
        cJSON_AddNumberToObject(o, "speedup", sc->speedup[mi]);
        cJSON_AddItemToArray(loads, o);
    }
    cJSON_AddNumberToObject(root, "score", sc->score);
    cJSON_AddNumberToObject(root, "score_ci_lo", sc->lo);
    cJSON_AddNumberToObject(root, "score_ci_hi", sc->hi);
    return root;
}

static int write_json(out_file *o, const pj_bo_run *run, const pj_bo_shape *sh,
                      const pj_bo_score *sc)
{
    cJSON *root = run_json(run, sh, sc);
    char *js = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!js)
        return -ENOMEM;
    fputs(js, o->f);
    fputc('\n', o->f);
    free(js);
    return 0;
}

/* Shapes that did not run what the table chose, or were wrong after their
 * timed replays: said in the markdown as in the JSON, so that the table of
 * a run with either does not read as a clean one. */
static void write_md(FILE *f, const pj_bo_run *run, const pj_bo_shape *sh, const pj_bo_score *sc)
{
    fprintf(f,
            "# projd-bench, %s\n\n%s (%d SMs), CUDA runtime %d, commit %s, %d paired reps%s, "
            "table %s\n\n",
            run->date, run->device, run->sm_count, run->cuda_runtime,
            run->commit ? run->commit : "?", run->reps, run->primed ? " (primed)" : " (not primed)",
            run->table ? run->table : "(none: untuned ladder)");
    fprintf(f, "Timing: %s; flush: %s", timing_text(run), flush_text(run->flush_kind));
    if (run->flush_carveout >= 0)
        fprintf(f, " (carveout %d %%)", run->flush_carveout);
    if (run->config)
        fprintf(f, "; model of %s", run->config);
    else
        fprintf(f, "; generated weights, seed %llu", (unsigned long long)run->seed);
    fprintf(f, ".\n\n");
    fprintf(f, "| layer | m | engine | knobs | baseline µs | ours µs | speedup | floor µs | "
               "ours/floor |\n|---|---|---|---|---|---|---|---|---|\n");
    int fell = 0, wrong = 0;
    for (int si = 0; si < run->nl * run->nm; si++) {
        const pj_bo_shape *s = &sh[si];
        fell += !s->valid;
        wrong += !s->after_ok;
        fprintf(f, "| %s | %u | %s%s%s%s | %s | %.2f (%s) | %.2f | %.3f%s | %.2f | %.2f |\n",
                s->layer, s->m, s->engine, s->valid ? "" : " (fell back from ",
                s->valid ? "" : s->chosen, s->valid ? "" : ")", s->knobs, s->base_us,
                s->base_lt ? "lt" : "gemmex", s->ours_us, speedup_of(s),
                s->after_ok ? "" : " **wrong after replays**", s->floor_us,
                s->ours_us / s->floor_us);
    }
    fprintf(f, "\n| load | baseline µs | ours µs | speedup |\n|---|---|---|---|\n");
    for (int mi = 0; mi < run->nm; mi++) {
        char name[32];
        pj_bo_load_name(run, mi, name, sizeof name);
        fprintf(f, "| %s | %.2f | %.2f | %.3f |\n", name, sc->base_sum[mi], sc->ours_sum[mi],
                sc->speedup[mi]);
    }
    fprintf(f,
            "\n**Score (geometric mean of the %d loads): %.3f×** (bootstrap 95 %% CI "
            "%.3f–%.3f, the repetitions of this run)\n",
            run->nm, sc->score, sc->lo, sc->hi);
    if (fell)
        fprintf(f,
                "\n%d shape(s) ran cuBLAS because the chosen engine failed validation "
                "(bench.json: invalid_reason).\n",
                fell);
    if (wrong)
        fprintf(f,
                "\n**%d shape(s) gave a wrong result after their timed replays** "
                "(bench.json: after_replays_reason); their times are of a wrong result.\n",
                wrong);
}

/* Every paired repetition, so that a shape that moved between runs can be
 * looked at afterwards. In round r the baseline ran first when r is even
 * (projd-bench's time_graphs). */
static void write_samples(FILE *f, const pj_bo_run *run, const pj_bo_shape *sh)
{
    fprintf(f, "layer,m,round,first,base_us,ours_us\n");
    for (int si = 0; si < run->nl * run->nm; si++)
        for (int r = 0; r < run->reps; r++)
            fprintf(f, "%s,%u,%d,%s,%.3f,%.3f\n", sh[si].layer, sh[si].m, r,
                    r % 2 ? "ours" : "base", sh[si].tb[r], sh[si].to[r]);
}

/* Chart data for gnuplot (bench/plot.sh draws the PNG). */
static void write_dat(FILE *f, const pj_bo_run *run, const pj_bo_shape *sh)
{
    fprintf(f, "# label speedup engine\n");
    for (int si = 0; si < run->nl * run->nm; si++)
        fprintf(f, "\"%s/%u\" %.4f %s\n", sh[si].layer, sh[si].m, speedup_of(&sh[si]),
                sh[si].engine);
}

int pj_bo_write(int dirfd, const char *dir, const pj_bo_run *run, const pj_bo_shape *sh,
                const pj_bo_score *sc, char *err, size_t errlen)
{
    for (int i = 0; i < 4; i++) {
        out_file o;
        int rc = out_open(&o, dirfd, dir, result_names[i], err, errlen);
        if (rc)
            return rc;
        switch (i) {
        case 0:
            rc = write_json(&o, run, sh, sc);
            break;
        case 1:
            write_md(o.f, run, sh, sc);
            break;
        case 2:
            write_samples(o.f, run, sh);
            break;
        default:
            write_dat(o.f, run, sh);
            break;
        }
        if (rc) {
            fclose(o.f);
            unlinkat(dirfd, o.tmp, 0);
            say(err, errlen, dir, o.name, "cannot build it", -rc);
            return rc;
        }
        rc = out_commit(&o, err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}

void pj_bo_print(FILE *f, const pj_bo_run *run, const pj_bo_shape *sh, const pj_bo_score *sc)
{
    fprintf(f, "\n%-10s %4s %-7s %10s %10s %8s %9s\n", "layer", "m", "engine", "base_us", "ours_us",
            "speedup", "vs_floor");
    for (int si = 0; si < run->nl * run->nm; si++) {
        const pj_bo_shape *s = &sh[si];
        fprintf(f, "%-10s %4u %-7s %10.2f %10.2f %8.3f %9.2f%s\n", s->layer, s->m, s->engine,
                s->base_us, s->ours_us, speedup_of(s), s->ours_us / s->floor_us,
                s->after_ok ? "" : "  WRONG after replays");
    }
    fprintf(f, "\n%-11s %10s %10s %8s\n", "load", "base_us", "ours_us", "speedup");
    for (int mi = 0; mi < run->nm; mi++) {
        char name[32];
        pj_bo_load_name(run, mi, name, sizeof name);
        fprintf(f, "%-11s %10.2f %10.2f %8.3f\n", name, sc->base_sum[mi], sc->ours_sum[mi],
                sc->speedup[mi]);
    }
    fprintf(f, "SCORE %.3f  (95%% CI %.3f-%.3f)\n", sc->score, sc->lo, sc->hi);
}
