/* test_dispatch.c — the tuned-table loader and the (layer, m) routing of
 * kernels/dispatch.c (no GPU needed: device checks go through a stub). */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/tablepick.h"
#include "kernels/dispatch.h"
#include "tests/helpers/fixture.h"

static int n_msgs;
static char last_msg[512];

static void on_msg(void *ctx, const char *msg)
{
    (void)ctx;
    n_msgs++;
    snprintf(last_msg, sizeof last_msg, "%s", msg);
}

/* Stub device check: refuses gemvz entries with nw = 16 (as if they needed
 * more shared memory than the device has). */
static int stub_check(void *ctx, const pj_tune_entry *e, char *why, size_t whylen)
{
    (void)ctx;
    if (e->eng == PJ_ENG_GEMVZ && e->knobs.nw == 16) {
        snprintf(why, whylen, "%s m=%u gemvz: shared memory exceeds the device", e->layer, e->m);
        return -ERANGE;
    }
    return 0;
}

static const char *good = "{\"device\":\"NVIDIA H200\",\"sm_count\":132,\"entries\":["
                          "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":1,\"engine\":\"gemvz\","
                          "\"knobs\":{\"nw\":8,\"ks\":2,\"u\":1,\"pipe\":1,\"xs\":1,\"r\":1},"
                          "\"us\":5.5,\"base_us\":7.1},"
                          "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":8,\"engine\":\"gemv\","
                          "\"knobs\":{\"nw\":4,\"ks\":1,\"u\":2,\"pipe\":0,\"minb\":1}},"
                          "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":32,\"engine\":\"cublas\","
                          "\"knobs\":{\"algo\":1}},"
                          "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":128,\"engine\":\"splitk\","
                          "\"knobs\":{\"tile\":2,\"ks\":4}},"
                          "{\"layer\":\"router\",\"n\":256,\"k\":4096,\"m\":16,\"engine\":"
                          "\"router\",\"knobs\":{\"nw\":4,\"ks\":16,\"u\":1}}]}";

START_TEST(loads_good_table)
{
    pj_tune_table t;
    char err[256] = "";
    n_msgs = 0;
    int n = pj_tune_parse(good, strlen(good), &t, stub_check, NULL, on_msg, NULL, err, sizeof err);
    ck_assert_int_eq(n, 5);
    ck_assert_int_eq(n_msgs, 0);
    ck_assert_str_eq(t.device, "NVIDIA H200");
    ck_assert_int_eq(t.sm_count, 132);
    ck_assert_int_eq(t.e[0].eng, PJ_ENG_GEMVZ);
    ck_assert_uint_eq(t.e[0].knobs.ks, 2);
    ck_assert_uint_eq(t.e[0].knobs.xs, 1);
    ck_assert_uint_eq(t.e[1].knobs.minb, 1);
    ck_assert_uint_eq(t.e[3].knobs.tile, 2);
    ck_assert(t.e[0].us > 5.49f && t.e[0].us < 5.51f);
}
END_TEST

START_TEST(routes_to_nearest_entry)
{
    pj_tune_table t;
    char err[256];
    ck_assert_int_eq(pj_tune_parse(good, strlen(good), &t, NULL, NULL, NULL, NULL, err, sizeof err),
                     5);
    /* smallest m' >= m */
    ck_assert_uint_eq(pj_dispatch_choose(&t, "o", 4096, 2048, 1)->m, 1);
    ck_assert_uint_eq(pj_dispatch_choose(&t, "o", 4096, 2048, 2)->m, 8);
    ck_assert_uint_eq(pj_dispatch_choose(&t, "o", 4096, 2048, 9)->m, 32);
    ck_assert_uint_eq(pj_dispatch_choose(&t, "o", 4096, 2048, 33)->m, 128);
    /* beyond the largest: the largest */
    ck_assert_uint_eq(pj_dispatch_choose(&t, "o", 4096, 2048, 1000)->m, 128);
    /* shape mismatch or unknown layer: nothing */
    ck_assert_ptr_null(pj_dispatch_choose(&t, "o", 4096, 4096, 1));
    ck_assert_ptr_null(pj_dispatch_choose(&t, "qkv_gate", 4608, 4096, 1));
    /* A router entry serves only m of its own form: the m = 16 one (the
     * GEMV form) is not the tiled GEMM's at m = 200. */
    ck_assert_uint_eq(pj_dispatch_choose(&t, "router", 256, 4096, 20)->m, 16);
    ck_assert_uint_eq(pj_dispatch_choose(&t, "router", 256, 4096, 32)->m, 16);
    ck_assert_ptr_null(pj_dispatch_choose(&t, "router", 256, 4096, 33));
    ck_assert_ptr_null(pj_dispatch_choose(&t, "router", 256, 4096, 200));
}
END_TEST

START_TEST(rejects_bad_entries_one_by_one)
{
    const char *js = "{\"entries\":["
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":1,\"engine\":\"warp9\"},"
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":2,\"engine\":\"gemv\","
                     "\"knobs\":{\"tile\":1}},"
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":3,\"engine\":\"gemv\","
                     "\"knobs\":{\"nw\":99}},"
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":0,\"engine\":\"gemv\"},"
                     "{\"layer\":\"\",\"m\":4,\"engine\":\"gemv\"},"
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":5,\"engine\":\"gemvz\","
                     "\"knobs\":{\"nw\":16,\"ks\":1,\"u\":1,\"r\":1}},"
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":6,\"engine\":\"cublas\"},"
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":6,\"engine\":\"cublas\"},"
                     "7]}";
    pj_tune_table t;
    char err[256];
    n_msgs = 0;
    int n = pj_tune_parse(js, strlen(js), &t, stub_check, NULL, on_msg, NULL, err, sizeof err);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(n_msgs, 8);
    ck_assert_ptr_nonnull(strstr(last_msg, "entries[8]"));
    ck_assert_uint_eq(t.e[0].m, 6);
}
END_TEST

START_TEST(rejects_broken_files)
{
    pj_tune_table t;
    char err[256] = "";
    ck_assert_int_eq(pj_tune_parse("{", 1, &t, NULL, NULL, NULL, NULL, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "not valid JSON"));
    ck_assert_int_eq(pj_tune_parse("{\"x\":1}", 7, &t, NULL, NULL, NULL, NULL, err, sizeof err),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "entries"));
    ck_assert_int_lt(
        pj_tune_load("/nonexistent/table.json", &t, NULL, NULL, NULL, NULL, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/table.json"));
    /* A directory: the reason, not "read error". */
    ck_assert_int_eq(pj_tune_load("/tmp", &t, NULL, NULL, NULL, NULL, err, sizeof err), -EISDIR);
    ck_assert_ptr_nonnull(strstr(err, "/tmp"));
    ck_assert_ptr_nonnull(strstr(err, strerror(EISDIR)));
    /* A FIFO is refused at once: a read would wait for a writer, and hold
     * a daemon's start (the test's timeout ends a wait). */
    char fifo[] = "/tmp/pjt-fifo-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(fifo));
    char fp[64];
    snprintf(fp, sizeof fp, "%s/h200.json", fifo);
    ck_assert_int_eq(mkfifo(fp, 0600), 0);
    ck_assert_int_eq(pj_tune_load(fp, &t, NULL, NULL, NULL, NULL, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "not a regular file"), "%s", err);
    unlink(fp);
    rmdir(fifo);
}
END_TEST

START_TEST(round_trips_through_json)
{
    pj_tune_table t, u;
    char err[256];
    ck_assert_int_eq(pj_tune_parse(good, strlen(good), &t, NULL, NULL, NULL, NULL, err, sizeof err),
                     5);
    char *js = pj_tune_to_json(&t, "abc123", "2026-11-30");
    ck_assert_ptr_nonnull(js);
    ck_assert_int_eq(pj_tune_parse(js, strlen(js), &u, NULL, NULL, NULL, NULL, err, sizeof err), 5);
    for (uint32_t i = 0; i < 5; i++) {
        ck_assert_str_eq(t.e[i].layer, u.e[i].layer);
        ck_assert_uint_eq(t.e[i].m, u.e[i].m);
        ck_assert_int_eq(t.e[i].eng, u.e[i].eng);
        ck_assert_mem_eq(&t.e[i].knobs, &u.e[i].knobs, sizeof t.e[i].knobs);
    }
    free(js);
    /* put replaces an existing (layer, m) */
    pj_tune_entry e = t.e[0];
    e.eng = PJ_ENG_CUBLAS;
    ck_assert_int_eq(pj_tune_put(&t, &e), 0);
    ck_assert_uint_eq(t.n, 5);
    ck_assert_int_eq(t.e[0].eng, PJ_ENG_CUBLAS);
}
END_TEST

/* One table may serve several models of the same layer names (tables are
 * per GPU, not per model): "o" of 4096 x 2048 and "o" of 2048 x 1024 at the
 * same m are two entries, each routed to its own shape. The loader used to
 * drop the second as a "duplicate entry" and pj_tune_put replaced one with
 * the other. */
START_TEST(same_layer_two_shapes)
{
    const char *js = "{\"entries\":["
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":1,\"engine\":\"cublas\"},"
                     "{\"layer\":\"o\",\"n\":2048,\"k\":1024,\"m\":1,\"engine\":\"gemv\","
                     "\"knobs\":{\"nw\":4,\"ks\":1,\"u\":1}},"
                     "{\"layer\":\"o\",\"n\":2048,\"k\":1024,\"m\":1,\"engine\":\"gemv\"}]}";
    pj_tune_table t;
    char err[256];
    n_msgs = 0;
    ck_assert_int_eq(pj_tune_parse(js, strlen(js), &t, NULL, NULL, on_msg, NULL, err, sizeof err),
                     2);
    /* a true duplicate (same layer, shape and m) is still refused */
    ck_assert_int_eq(n_msgs, 1);
    ck_assert_ptr_nonnull(strstr(last_msg, "entries[2]"));
    ck_assert_ptr_nonnull(strstr(last_msg, "duplicate"));
    ck_assert_int_eq(pj_dispatch_choose(&t, "o", 4096, 2048, 1)->eng, PJ_ENG_CUBLAS);
    ck_assert_int_eq(pj_dispatch_choose(&t, "o", 2048, 1024, 1)->eng, PJ_ENG_GEMV);
    /* put keeps the shapes apart too, and replaces the entry of its own */
    pj_tune_entry e = t.e[0];
    e.eng = PJ_ENG_SPLITK;
    ck_assert_int_eq(pj_tune_put(&t, &e), 0);
    ck_assert_uint_eq(t.n, 2);
    ck_assert_int_eq(pj_dispatch_choose(&t, "o", 4096, 2048, 1)->eng, PJ_ENG_SPLITK);
    ck_assert_int_eq(pj_dispatch_choose(&t, "o", 2048, 1024, 1)->eng, PJ_ENG_GEMV);
    e.n = 1024;
    e.k = 512;
    ck_assert_int_eq(pj_tune_put(&t, &e), 0);
    ck_assert_uint_eq(t.n, 3);
}
END_TEST

/* Text after the table is an error, not ignored: two tables concatenated
 * into one file (cat a.json b.json > t.json) used to load the first alone
 * without a word. */
START_TEST(rejects_text_after_the_table)
{
    pj_tune_table t;
    char err[256] = "";
    const char *two = "{\"entries\":[{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":1,"
                      "\"engine\":\"cublas\"}]}\n"
                      "{\"entries\":[{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":8,"
                      "\"engine\":\"cublas\"}]}\n";
    ck_assert_int_eq(pj_tune_parse(two, strlen(two), &t, NULL, NULL, NULL, NULL, err, sizeof err),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "after the table"));
    ck_assert_ptr_nonnull(strstr(err, "byte 70"));
    ck_assert_uint_eq(t.n, 0);
    /* trailing white space is fine */
    const char *ws = "{\"entries\":[]}\n\t \r\n";
    ck_assert_int_eq(pj_tune_parse(ws, strlen(ws), &t, NULL, NULL, NULL, NULL, err, sizeof err), 0);
}
END_TEST

/* The times are written to 1 ns as read: 5 s (a shape the tuner timed out
 * on, or a hand-written figure) used to come back as -2147483.648 (an
 * out-of-range float-to-int conversion) and negative figures moved by 1 ns. */
START_TEST(times_round_trip)
{
    const char *js = "{\"entries\":[{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":1,"
                     "\"engine\":\"cublas\",\"us\":5000000.25,\"base_us\":-1.25}]}";
    pj_tune_table t, u;
    char err[256];
    ck_assert_int_eq(pj_tune_parse(js, strlen(js), &t, NULL, NULL, NULL, NULL, err, sizeof err), 1);
    char *out = pj_tune_to_json(&t, "c", "d");
    ck_assert_ptr_nonnull(out);
    ck_assert_int_eq(pj_tune_parse(out, strlen(out), &u, NULL, NULL, NULL, NULL, err, sizeof err),
                     1);
    free(out);
    ck_assert_float_eq(u.e[0].us, 5000000.25f);
    ck_assert_float_eq(u.e[0].base_us, -1.25f);
}
END_TEST

/* pj_tune_save (what projd-bench --tune writes with): an unwritable place
 * is an error naming the file and why, and a write that fails part way (a
 * full disk, here a file size limit) leaves the table that was there. The
 * tuner used to fopen/fputs/fclose in place: under a 4 KiB limit it left
 * 4096 bytes of h200.json's 8 KiB and reported success. */
START_TEST(save_reports_and_keeps_the_old_table)
{
    pj_tune_table t, u;
    char err[256] = "", dir[] = "/tmp/pj-dispatch-XXXXXX", path[256];
    ck_assert_int_eq(pj_tune_parse(good, strlen(good), &t, NULL, NULL, NULL, NULL, err, sizeof err),
                     5);
    ck_assert_int_eq(pj_tune_save("/nonexistent/dir/t.json", &t, "c", "d", err, sizeof err),
                     -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/dir/t.json"));
    ck_assert_ptr_nonnull(strstr(err, strerror(ENOENT)));

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/t.json", dir);
    ck_assert_int_eq(pj_tune_save(path, &t, "c", "d", err, sizeof err), 0);
    ck_assert_int_eq(pj_tune_load(path, &u, NULL, NULL, NULL, NULL, err, sizeof err), 5);
    ck_assert_int_eq(pj_fixture_temporaries(path), 0);

    /* A table too large for the limit, over the good one. */
    pj_tune_table big = t;
    for (uint32_t i = 0; i < 200; i++) {
        pj_tune_entry e = t.e[0];
        e.m = 1000 + i;
        ck_assert_int_eq(pj_tune_put(&big, &e), 0);
    }
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct rlimit rl = {4096, 4096};
        signal(SIGXFSZ, SIG_IGN);
        if (setrlimit(RLIMIT_FSIZE, &rl))
            _exit(3);
        char e2[256] = "";
        int rc = pj_tune_save(path, &big, "c", "d", e2, sizeof e2);
        _exit(rc == -EFBIG && strstr(e2, "unchanged") ? 0 : 1);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    ck_assert_int_eq(WEXITSTATUS(status), 0);
    ck_assert_int_eq(pj_tune_load(path, &u, NULL, NULL, NULL, NULL, err, sizeof err), 5);
    ck_assert_int_eq(pj_fixture_temporaries(path), 0);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* The shipped tables (config/tuning/) load whole, each names the device
 * the daemon matches it to (its file name is that name's slug), and every
 * m a daemon may see routes, for every layer, to that layer's entry with
 * the smallest m' >= m, or its largest entry beyond the last. */
START_TEST(shipped_table_routes_every_m)
{
    static const struct {
        const char *file, *device;
    } shipped[] = {{"h200.json", "NVIDIA H200"}, {"h100-80gb-hbm3.json", "NVIDIA H100 80GB HBM3"}};
    const char *src = getenv("PJ_SRCDIR") ? getenv("PJ_SRCDIR") : ".";
    for (size_t f = 0; f < sizeof shipped / sizeof shipped[0]; f++) {
        char path[512], err[256] = "";
        snprintf(path, sizeof path, "%s/config/tuning/%s", src, shipped[f].file);
        static pj_tune_table t;
        n_msgs = 0;
        const int n = pj_tune_load(path, &t, NULL, NULL, on_msg, NULL, err, sizeof err);
        ck_assert_msg(n == 30, "%s: %d entries (%s; run from the repository root or set PJ_SRCDIR)",
                      path, n, err);
        ck_assert_int_eq(n_msgs, 0);
        ck_assert_str_eq(t.device, shipped[f].device);
        for (uint32_t i = 0; i < t.n; i++) {
            const pj_tune_entry *e = &t.e[i];
            ck_assert_msg(e->n && e->k, "%s: %s m=%u: no shape", path, e->layer, e->m);
            uint32_t lo = 1, hi = 1u << 16; /* the m this entry serves */
            for (uint32_t j = 0; j < t.n; j++) {
                const pj_tune_entry *o = &t.e[j];
                if (strcmp(o->layer, e->layer) != 0)
                    continue;
                if (o->m < e->m && o->m + 1 > lo)
                    lo = o->m + 1;
                if (o->m > e->m)
                    hi = e->m;
            }
            for (uint32_t m = lo; m <= hi; m++)
                ck_assert_ptr_eq(pj_dispatch_choose(&t, e->layer, e->n, e->k, m), e);
        }
    }
}
END_TEST

static void expect_one_rejection(const char *js, const char *why);

/* "rows": an entry timed on a row prefix of its layer says how many rows,
 * round-trips, and is refused above n; pj_tune_rows_below lists the rows
 * the layer's (and shape's) entries were timed on below the caller's
 * max_n, each once and ascending, never of entries that say nothing. The
 * shipped tables' unpooler entries were timed on its first 1024 rows (the
 * reference requests'). */

/* pj_tune_rows_below's list as "a,b,c" (its count first: "3:"). */
static const char *rows_below(const pj_tune_table *t, const char *layer, uint32_t n, uint32_t k,
                              uint32_t below, uint32_t cap)
{
    static char s[128];
    uint32_t v[8] = {0};
    ck_assert_uint_le(cap, 8);
    uint32_t total = pj_tune_rows_below(t, layer, n, k, below, v, cap);
    int at = snprintf(s, sizeof s, "%u:", total);
    for (uint32_t i = 0; i < total && i < cap; i++)
        at += snprintf(s + at, sizeof s - (size_t)at, "%s%u", i ? "," : "", v[i]);
    return s;
}

START_TEST(rows_of_a_row_prefix)
{
    const char *js = "{\"entries\":["
                     "{\"layer\":\"u\",\"n\":8192,\"k\":4096,\"m\":1,\"engine\":\"cublas\"},"
                     "{\"layer\":\"u\",\"n\":8192,\"k\":4096,\"rows\":1024,\"m\":8,"
                     "\"engine\":\"cublas\"},"
                     "{\"layer\":\"u\",\"n\":4096,\"k\":4096,\"rows\":512,\"m\":8,"
                     "\"engine\":\"cublas\"},"
                     "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":1,\"engine\":\"cublas\"}]}";
    pj_tune_table t, u;
    char err[256];
    ck_assert_int_eq(pj_tune_parse(js, strlen(js), &t, NULL, NULL, NULL, NULL, err, sizeof err), 4);
    ck_assert_uint_eq(t.e[0].rows, 0);
    ck_assert_uint_eq(t.e[1].rows, 1024);
    ck_assert_str_eq(rows_below(&t, "u", 8192, 4096, 1024, 4), "0:"); /* not below */
    ck_assert_str_eq(rows_below(&t, "u", 8192, 4096, 8192, 4), "1:1024");
    ck_assert_str_eq(rows_below(&t, "u", 8192, 4096, 2048, 4), "1:1024");
    ck_assert_str_eq(rows_below(&t, "u", 8192, 4096, 8192, 0), "1:");    /* counted, not kept */
    ck_assert_str_eq(rows_below(&t, "u", 4096, 4096, 4096, 4), "1:512"); /* the other shape */
    ck_assert_str_eq(rows_below(&t, "u", 2048, 4096, 2048, 4), "0:");    /* no entry fits */
    ck_assert_str_eq(rows_below(&t, "o", 4096, 2048, 4096, 4), "0:");    /* rows not known */
    ck_assert_str_eq(rows_below(NULL, "u", 8192, 4096, 8192, 4), "0:");
    /* Several values: each once, ascending, whatever the file's order. */
    const char *many =
        "{\"entries\":["
        "{\"layer\":\"u\",\"n\":64,\"k\":64,\"rows\":48,\"m\":1,\"engine\":\"cublas\"},"
        "{\"layer\":\"u\",\"n\":64,\"k\":64,\"rows\":16,\"m\":2,\"engine\":\"cublas\"},"
        "{\"layer\":\"u\",\"n\":64,\"k\":64,\"rows\":48,\"m\":4,\"engine\":\"cublas\"},"
        "{\"layer\":\"u\",\"n\":64,\"k\":64,\"rows\":32,\"m\":8,\"engine\":\"cublas\"},"
        "{\"layer\":\"u\",\"n\":64,\"k\":64,\"rows\":8,\"m\":16,\"engine\":\"cublas\"}]}";
    ck_assert_int_eq(pj_tune_parse(many, strlen(many), &u, NULL, NULL, NULL, NULL, err, sizeof err),
                     5);
    ck_assert_str_eq(rows_below(&u, "u", 64, 64, 64, 8), "4:8,16,32,48");
    ck_assert_str_eq(rows_below(&u, "u", 64, 64, 40, 8), "3:8,16,32");
    ck_assert_str_eq(rows_below(&u, "u", 64, 64, 64, 2), "4:8,16"); /* the smallest two */
    ck_assert_str_eq(rows_below(&u, "u", 64, 64, 64, 1), "4:8");
    ck_assert_str_eq(rows_below(&u, "u", 64, 64, 33, 3), "3:8,16,32");
    ck_assert_str_eq(rows_below(&u, "v", 64, 64, 64, 8), "0:");
    char *out = pj_tune_to_json(&t, "c", "d");
    ck_assert_ptr_nonnull(out);
    ck_assert_int_eq(pj_tune_parse(out, strlen(out), &u, NULL, NULL, NULL, NULL, err, sizeof err),
                     4);
    ck_assert_uint_eq(u.e[0].rows, 0);
    ck_assert_uint_eq(u.e[1].rows, 1024);
    ck_assert_uint_eq(u.e[2].rows, 512);
    ck_assert_uint_eq(u.e[3].rows, 0);
    /* Written only where known: two entries say their rows. */
    int n_rows = 0;
    for (const char *p = out; (p = strstr(p, "\"rows\"")) != NULL; p++)
        n_rows++;
    ck_assert_int_eq(n_rows, 2);
    free(out);
    /* rows == n is a whole layer's rows, accepted; "rows": 0 is not known. */
    const char *edge = "{\"entries\":[{\"layer\":\"u\",\"n\":64,\"k\":64,\"rows\":64,\"m\":1,"
                       "\"engine\":\"cublas\"},{\"layer\":\"u\",\"n\":64,\"k\":64,\"rows\":0,"
                       "\"m\":2,\"engine\":\"cublas\"}]}";
    ck_assert_int_eq(pj_tune_parse(edge, strlen(edge), &t, NULL, NULL, NULL, NULL, err, sizeof err),
                     2);
    ck_assert_uint_eq(t.e[0].rows, 64);
    ck_assert_uint_eq(t.e[1].rows, 0);
    ck_assert_str_eq(rows_below(&t, "u", 64, 64, 64, 4), "0:"); /* 64 is all: not below */
    ck_assert_str_eq(rows_below(&t, NULL, 64, 64, 64, 4), "0:");

    expect_one_rejection("{\"entries\":[{\"layer\":\"u\",\"n\":1000,\"k\":64,\"rows\":1024,"
                         "\"m\":1,\"engine\":\"cublas\"}]}",
                         "\"rows\" 1024 is more than the layer's n 1000");
    expect_one_rejection("{\"entries\":[{\"layer\":\"u\",\"rows\":-1,\"m\":1,"
                         "\"engine\":\"cublas\"}]}",
                         "\"rows\" must be a non-negative integer");

    const char *src = getenv("PJ_SRCDIR") ? getenv("PJ_SRCDIR") : ".";
    static const char *const shipped[] = {"h200.json", "h100-80gb-hbm3.json"};
    for (size_t f = 0; f < sizeof shipped / sizeof shipped[0]; f++) {
        char path[512];
        snprintf(path, sizeof path, "%s/config/tuning/%s", src, shipped[f]);
        static pj_tune_table st;
        ck_assert_int_eq(pj_tune_load(path, &st, NULL, NULL, NULL, NULL, err, sizeof err), 30);
        for (uint32_t i = 0; i < st.n; i++)
            ck_assert_uint_eq(st.e[i].rows, strcmp(st.e[i].layer, "unpooler") ? 0 : 1024);
        ck_assert_str_eq(rows_below(&st, "unpooler", 8192, 4096, 1024, 4), "0:");
        ck_assert_str_eq(rows_below(&st, "unpooler", 8192, 4096, 8192, 4), "1:1024");
        ck_assert_str_eq(rows_below(&st, "pooler", 8192, 4096, 8192, 4), "0:");
    }
}
END_TEST

START_TEST(knob_strings)
{
    pj_eng_knobs kn;
    memset(&kn, 0, sizeof kn);
    char err[256], buf[128];
    ck_assert_int_eq(pj_eng_knobs_parse("nw=8,ks=4,u=2,pipe=1", -1, &kn, err, sizeof err), 0);
    ck_assert_uint_eq(kn.nw, 8);
    ck_assert_uint_eq(kn.ks, 4);
    pj_eng_knobs_str(PJ_ENG_GEMV, &kn, buf, sizeof buf);
    ck_assert_str_eq(buf, "nw=8,ks=4,u=2,pipe=1,minb=0,r=0,rb=0,cl=0");
    pj_eng_knobs before = kn;
    ck_assert_int_eq(pj_eng_knobs_parse("nw=8,bogus=1", -1, &kn, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "bogus"));
    ck_assert_mem_eq(&kn, &before, sizeof kn); /* untouched on error */
    ck_assert_int_eq(pj_eng_knobs_parse("ks=", -1, &kn, err, sizeof err), -EINVAL);
    ck_assert_int_eq(pj_eng_knobs_parse("u=300", -1, &kn, err, sizeof err), -EINVAL);
    /* A number and nothing else: strtoul would take a blank or a sign. */
    ck_assert_int_eq(pj_eng_knobs_parse("nw= 8", -1, &kn, err, sizeof err), -EINVAL);
    ck_assert_int_eq(pj_eng_knobs_parse("nw=+8", -1, &kn, err, sizeof err), -EINVAL);
    ck_assert_int_eq(pj_eng_knobs_parse("u=-1", -1, &kn, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "u expects an integer in 0..8"));
    ck_assert_mem_eq(&kn, &before, sizeof kn);
    /* A knob named twice, an empty item, and (for a given engine) a knob
     * that engine never reads: refused, not last-wins or ignored. */
    static const struct {
        const char *s;
        int eng;
        const char *why;
    } bad[] = {
        {"nw=4,nw=8", -1, "nw is given twice"},
        {"nw=8,", -1, "an empty item"},
        {",nw=8", -1, "an empty item"},
        {"nw=8,,u=2", -1, "an empty item"},
        {"nw=4", PJ_ENG_CUBLAS, "engine cublas has no knob \"nw\""},
        {"xs=3", PJ_ENG_GEMV, "engine gemv has no knob \"xs\""},
        {"algo=7", PJ_ENG_GEMVZ, "engine gemvz has no knob \"algo\""},
        {"tile=9", PJ_ENG_GEMV, "engine gemv has no knob \"tile\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(pj_eng_knobs_parse(bad[i].s, bad[i].eng, &kn, err, sizeof err), -EINVAL);
        ck_assert_msg(strstr(err, bad[i].why), "\"%s\": \"%s\" does not say \"%s\"", bad[i].s, err,
                      bad[i].why);
        ck_assert_mem_eq(&kn, &before, sizeof kn);
    }
    ck_assert_int_eq(pj_eng_knobs_parse("xs=3,ts=4", PJ_ENG_GEMVZ, &kn, err, sizeof err), 0);
    ck_assert_int_eq(pj_eng_knobs_parse("algo=3", PJ_ENG_CUBLAS, &kn, err, sizeof err), 0);
    ck_assert_int_eq(pj_eng_knobs_parse("", PJ_ENG_CUBLAS, &kn, err, sizeof err), 0);
    ck_assert_int_eq(pj_eng_from_name("gemvz"), PJ_ENG_GEMVZ);
    ck_assert_int_eq(pj_eng_from_name("nope"), -1);
}
END_TEST

/* A table of one entry for o at m = 128 (engine and knobs as given) loads
 * with that entry refused, the message naming why. */
static void expect_one_refused(const char *engine_and_knobs, const char *why)
{
    char js[512], err[256];
    snprintf(js, sizeof js,
             "{\"device\":\"NVIDIA H200\",\"entries\":[{\"layer\":\"o\",\"n\":4096,"
             "\"k\":2048,\"m\":128,%s}]}",
             engine_and_knobs);
    pj_tune_table t;
    n_msgs = 0;
    ck_assert_int_eq(pj_tune_parse(js, strlen(js), &t, NULL, NULL, on_msg, NULL, err, sizeof err),
                     0);
    ck_assert_int_eq(n_msgs, 1);
    ck_assert_msg(strstr(last_msg, why), "refusal \"%s\" does not say \"%s\"", last_msg, why);
}

/* cuBLAS's explicit configuration (round 38): its knobs are written only
 * when set (every other cublas entry reads as before), ltile holds 16 bits
 * through the knob string and the table's JSON, and each knob's range is
 * enforced. */
START_TEST(cublas_explicit_configuration)
{
    pj_eng_knobs kn;
    memset(&kn, 0, sizeof kn);
    char err[256], buf[160];
    kn.algo = 1;
    pj_eng_knobs_str(PJ_ENG_CUBLAS, &kn, buf, sizeof buf);
    ck_assert_str_eq(buf, "algo=1");
    memset(&kn, 0, sizeof kn);
    ck_assert_int_eq(pj_eng_knobs_parse("lt=1,lid=66,ltile=600,lst=35,lsk=4,lcu=2,lcl=7", -1, &kn,
                                        err, sizeof err),
                     0);
    ck_assert_uint_eq(kn.ltile, 600);
    ck_assert_uint_eq(kn.lid, 66);
    ck_assert_uint_eq(kn.lsk, 4);
    pj_eng_knobs_str(PJ_ENG_CUBLAS, &kn, buf, sizeof buf);
    ck_assert_str_eq(buf, "algo=0,lt=1,lid=66,ltile=600,lst=35,lsk=4,lcu=2,lcl=7");
    pj_eng_knobs before = kn;
    ck_assert_int_eq(pj_eng_knobs_parse("ltile=65536", -1, &kn, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "ltile expects an integer in 0..65535"));
    ck_assert_int_eq(pj_eng_knobs_parse("lsk=17", -1, &kn, err, sizeof err), -EINVAL);
    ck_assert_int_eq(pj_eng_knobs_parse("lt=2", -1, &kn, err, sizeof err), -EINVAL);
    /* Turning lt off leaves a configuration that would not run: refused. */
    ck_assert_int_eq(pj_eng_knobs_parse("lt=0", -1, &kn, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "lid=66 names a cuBLASLt configuration: it needs lt=1"));
    ck_assert_mem_eq(&kn, &before, sizeof kn);
    pj_eng_knobs plain;
    memset(&plain, 0, sizeof plain);
    ck_assert_int_eq(pj_eng_knobs_parse("algo=1,lsk=4", -1, &plain, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "lsk=4 names a cuBLASLt configuration"));
    ck_assert_int_eq(pj_eng_knobs_parse("lt=0,lid=0", -1, &plain, err, sizeof err), 0);

    static const char *js_in =
        "{\"device\":\"NVIDIA H200\",\"entries\":["
        "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":128,\"engine\":\"cublas\","
        "\"knobs\":{\"algo\":0,\"lt\":1,\"lid\":66,\"ltile\":4660,\"lst\":35,\"lcl\":5}}]}";
    pj_tune_table t, u;
    ck_assert_int_eq(
        pj_tune_parse(js_in, strlen(js_in), &t, NULL, NULL, NULL, NULL, err, sizeof err), 1);
    ck_assert_uint_eq(t.e[0].knobs.ltile, 4660);
    char *js = pj_tune_to_json(&t, "abc123", "2026-12-02");
    ck_assert_ptr_nonnull(js);
    ck_assert_ptr_nonnull(strstr(js, "\"ltile\""));
    ck_assert_ptr_nonnull(strstr(js, "4660"));
    ck_assert_ptr_null(strstr(js, "\"lsk\"")); /* 0: not written */
    ck_assert_int_eq(pj_tune_parse(js, strlen(js), &u, NULL, NULL, NULL, NULL, err, sizeof err), 1);
    ck_assert_mem_eq(&t.e[0].knobs, &u.e[0].knobs, sizeof t.e[0].knobs);
    free(js);
    /* The configuration serves its entry's own m; the others routed to the
     * entry run its algo, with no configuration left in the knobs. */
    t.e[0].knobs.algo = 1;
    pj_eng_knobs own = pj_tune_entry_knobs(&t.e[0], 128);
    ck_assert_mem_eq(&own, &t.e[0].knobs, sizeof own);
    pj_eng_knobs other = pj_tune_entry_knobs(&t.e[0], 100), want;
    memset(&want, 0, sizeof want);
    want.algo = 1;
    ck_assert_mem_eq(&other, &want, sizeof other);
    /* An algo of 2 or more is a place in cuBLASLt's list for the entry's
     * own shape: the other m run algo 0, with or without a configuration. */
    t.e[0].knobs.algo = 4;
    own = pj_tune_entry_knobs(&t.e[0], 128);
    ck_assert_mem_eq(&own, &t.e[0].knobs, sizeof own);
    other = pj_tune_entry_knobs(&t.e[0], 100);
    want.algo = 0;
    ck_assert_mem_eq(&other, &want, sizeof other);
    pj_eng_knobs bare = t.e[0].knobs;
    bare.lt = bare.lid = bare.lst = bare.lsk = bare.lcu = bare.lcl = bare.lsw = 0;
    bare.ltile = 0;
    t.e[0].knobs = bare;
    other = pj_tune_entry_knobs(&t.e[0], 33);
    ck_assert_uint_eq(other.algo, 0);
    ck_assert_uint_eq(pj_tune_entry_knobs(&t.e[0], 128).algo, 4);
    t.e[0].eng = PJ_ENG_SPLITK; /* only cublas has configurations to drop */
    other = pj_tune_entry_knobs(&t.e[0], 100);
    ck_assert_mem_eq(&other, &t.e[0].knobs, sizeof other);
    /* A configuration knob on an engine that has none is refused by name,
     * and on cuBLAS without lt = 1 by what is missing. */
    expect_one_refused("\"engine\":\"splitk\",\"knobs\":{\"ltile\":5}",
                       "engine splitk has no knob \"ltile\"");
    expect_one_refused("\"engine\":\"cublas\",\"knobs\":{\"algo\":1,\"ltile\":5}",
                       "o m=128: ltile=5 names a cuBLASLt configuration");
}
END_TEST

/* An entry tuned for the layer's very shape beats one for any shape (n, k
 * left out) at the same m, whichever comes first in the file; other shapes
 * still get the any-shape entry. */
START_TEST(exact_shape_beats_any_shape)
{
    static const char *any = "{\"layer\":\"o\",\"m\":8,\"engine\":\"gemv\","
                             "\"knobs\":{\"nw\":4,\"ks\":1,\"u\":1}}";
    static const char *own = "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":8,"
                             "\"engine\":\"cublas\",\"knobs\":{\"algo\":1}}";
    for (int order = 0; order < 2; order++) {
        char js[512];
        snprintf(js, sizeof js, "{\"entries\":[%s,%s]}", order ? own : any, order ? any : own);
        pj_tune_table t;
        char err[256];
        ck_assert_int_eq(pj_tune_parse(js, strlen(js), &t, NULL, NULL, NULL, NULL, err, sizeof err),
                         2);
        /* m = 8 as the entries' own m; m = 16 past them (the largest) */
        ck_assert_int_eq(pj_dispatch_choose(&t, "o", 4096, 2048, 8)->eng, PJ_ENG_CUBLAS);
        ck_assert_int_eq(pj_dispatch_choose(&t, "o", 4096, 2048, 16)->eng, PJ_ENG_CUBLAS);
        ck_assert_int_eq(pj_dispatch_choose(&t, "o", 2048, 1024, 8)->eng, PJ_ENG_GEMV);
    }
}
END_TEST

/* The table js (one entry) loads empty, its entry rejected by one message
 * that says why. */
static void expect_one_rejection(const char *js, const char *why)
{
    char err[256];
    pj_tune_table t;
    n_msgs = 0;
    ck_assert_int_eq(pj_tune_parse(js, strlen(js), &t, NULL, NULL, on_msg, NULL, err, sizeof err),
                     0);
    ck_assert_int_eq(n_msgs, 1);
    ck_assert_msg(strstr(last_msg, why), "%s: \"%s\" does not say \"%s\"", js, last_msg, why);
}

/* cJSON keeps a repeated key and its lookups take the first; a misspelt
 * key is never looked up. Both would load an entry that is not what the
 * file says: refused, each entry alone, with the key named. A repeated
 * top-level key fails the table; an unknown one is said and ignored. */
START_TEST(rejects_odd_keys)
{
    static const struct {
        const char *entry, *why;
    } bad[] = {
        {"\"m\":1,\"m\":8,\"engine\":\"cublas\"", "repeated key \"m\""},
        {"\"m\":8,\"engine\":\"gemv\",\"engine\":\"cublas\"", "repeated key \"engine\""},
        {"\"m\":8,\"engine\":\"cublas\",\"knob\":{\"algo\":3}", "unknown key \"knob\""},
        {"\"m\":8,\"engine\":\"gemv\",\"knobs\":{\"nw\":4,\"nw\":16}",
         "knob \"nw\" is given twice"},
        {"\"m\":8,\"engine\":\"gemvz\",\"knobs\":{\"pipe\":4,\"nw\":4,\"xs\":2}",
         "gemvz pipe=4 (the balanced GEMV) reads none of cl, xs, ts, st"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char js[512];
        snprintf(js, sizeof js, "{\"entries\":[{\"layer\":\"o\",%s}]}", bad[i].entry);
        expect_one_rejection(js, bad[i].why);
    }
    char err[256];
    pj_tune_table t;
    const char *twice =
        "{\"entries\":[],\"entries\":[{\"layer\":\"o\",\"m\":1,\"engine\":\"gemv\"}]}";
    ck_assert_int_eq(
        pj_tune_parse(twice, strlen(twice), &t, NULL, NULL, NULL, NULL, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "key \"entries\" is given twice"));
    const char *extra = "{\"note\":\"hand-made\",\"entries\":[{\"layer\":\"o\",\"m\":1,"
                        "\"engine\":\"cublas\",\"knobs\":{\"algo\":1}}]}";
    n_msgs = 0;
    ck_assert_int_eq(
        pj_tune_parse(extra, strlen(extra), &t, NULL, NULL, on_msg, NULL, err, sizeof err), 1);
    ck_assert_int_eq(n_msgs, 1);
    ck_assert_ptr_nonnull(strstr(last_msg, "unknown key \"note\" ignored"));
}
END_TEST

/* Nothing of the file reaches a message unescaped (an operator reads them
 * on a terminal, one line each), and nothing cJSON would read as something
 * else loads: a name cut at its NUL, a raw control byte, a layer name no
 * config can give, a time a float does not hold. Found by fuzz_tune. */
static int printable_line(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
            return 0;
    return 1;
}

START_TEST(refuses_what_cjson_misreads)
{
    static const struct {
        const char *entry, *why;
    } bad[] = {
        {"\"layer\":\"o\\n\",\"m\":8,\"engine\":\"cublas\"", "must be a layer name"},
        {"\"layer\":\"a b\",\"m\":8,\"engine\":\"cublas\"", "must be a layer name"},
        {"\"layer\":\"o\",\"m\":8,\"engine\":\"gemv\",\"knobs\":{\"\\u001b[2J\":1}",
         "has no knob \"\\x1b[2J\""},
        {"\"layer\":\"o\",\"m\":8,\"engine\":\"gemv\\r\"", "unknown engine \"gemv\\x0d\""},
        {"\"layer\":\"o\",\"m\":8,\"engine\":\"cublas\",\"us\":1e39", "\"us\" must be a time"},
        {"\"layer\":\"o\",\"m\":8,\"engine\":\"cublas\",\"base_us\":-2e9",
         "\"base_us\" must be a time"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char js[512];
        snprintf(js, sizeof js, "{\"entries\":[{%s}]}", bad[i].entry);
        expect_one_rejection(js, bad[i].why);
        ck_assert_msg(printable_line(last_msg), "%s: message not one printable line", js);
    }
    /* Whole tables refused: a NUL inside a string, a raw control byte. */
    static const struct {
        const char *js, *why;
    } broken[] = {
        {"{\"entries\":[{\"layer\":\"o\",\"m\":8,\"engine\":\"gemv\",\"knobs\":{\"nw\\u0000x\":8}}]"
         "}",
         "\\u0000"},
        {"{\"entries\":[{\"layer\":\"o\x01\",\"m\":8,\"engine\":\"cublas\"}]}", "at byte 23"},
        {"{\"entries\":[],\"\\u001b\":1,\"\\u001b\":2}", "key \"\\x1b\" is given twice"},
    };
    for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++) {
        char err[256] = "";
        pj_tune_table t;
        ck_assert_int_eq(pj_tune_parse(broken[i].js, strlen(broken[i].js), &t, NULL, NULL, NULL,
                                       NULL, err, sizeof err),
                         -EINVAL);
        ck_assert_msg(strstr(err, broken[i].why), "%s: \"%s\" does not say \"%s\"", broken[i].js,
                      err, broken[i].why);
        ck_assert_msg(printable_line(err), "%s: message not one printable line", broken[i].js);
        ck_assert_uint_eq(t.n, 0);
    }
    /* What the tuner writes loads again: a baseline that never ran (its
     * time infinite) is left out, and null, as older tables hold it, reads
     * as no time; a time just under the bound that rounds to it as a float
     * is refused at once, not after a save. */
    {
        pj_tune_table w = {.n = 1};
        snprintf(w.e[0].layer, sizeof w.e[0].layer, "o");
        w.e[0].m = 1;
        w.e[0].eng = PJ_ENG_CUBLAS;
        w.e[0].us = 7.5f;
        w.e[0].base_us = INFINITY;
        char *js = pj_tune_to_json(&w, "c", "d");
        ck_assert_ptr_nonnull(js);
        ck_assert_ptr_null(strstr(js, "base_us"));
        pj_tune_table r;
        char e2[256];
        ck_assert_int_eq(pj_tune_parse(js, strlen(js), &r, NULL, NULL, NULL, NULL, e2, sizeof e2),
                         1);
        free(js);
        const char *null_time = "{\"entries\":[{\"layer\":\"o\",\"m\":1,\"engine\":\"cublas\","
                                "\"us\":7.5,\"base_us\":null}]}";
        ck_assert_int_eq(
            pj_tune_parse(null_time, strlen(null_time), &r, NULL, NULL, NULL, NULL, e2, sizeof e2),
            1);
        ck_assert_float_eq(r.e[0].us, 7.5f);
        ck_assert_float_eq(r.e[0].base_us, 0);
        const char *rounds = "{\"entries\":[{\"layer\":\"o\",\"m\":1,\"engine\":\"cublas\","
                             "\"us\":999999990}]}";
        n_msgs = 0;
        ck_assert_int_eq(
            pj_tune_parse(rounds, strlen(rounds), &r, NULL, NULL, on_msg, NULL, e2, sizeof e2), 0);
        ck_assert_int_eq(n_msgs, 1);
        /* A device name with control bytes is kept printable. */
        const char *dev = "{\"device\":\"H\\u001b[2J200\",\"entries\":[]}";
        ck_assert_int_eq(pj_tune_parse(dev, strlen(dev), &r, NULL, NULL, NULL, NULL, e2, sizeof e2),
                         0);
        ck_assert_str_eq(r.device, "H?[2J200");
    }
    /* A NUL after the table still ends it, as in a C string. */
    const char nul_end[] = "{\"entries\":[{\"layer\":\"o\",\"m\":1,\"engine\":\"cublas\"}]}\0junk";
    char err[256];
    pj_tune_table t;
    ck_assert_int_eq(
        pj_tune_parse(nul_end, sizeof nul_end - 1, &t, NULL, NULL, NULL, NULL, err, sizeof err), 1);
    /* A knob string from the environment or a config, shown escaped. */
    pj_eng_knobs kn = {0};
    ck_assert_int_eq(pj_eng_knobs_parse("nw=8,\x1b[2J=1", PJ_ENG_GEMV, &kn, err, sizeof err),
                     -EINVAL);
    ck_assert_msg(strstr(err, "unknown knob \"\\x1b[2J\""), "%s", err);
    ck_assert_msg(printable_line(err), "%s", err);
    ck_assert_int_eq(pj_eng_knobs_parse("nw=8,\n", PJ_ENG_GEMV, &kn, err, sizeof err), -EINVAL);
    ck_assert_msg(printable_line(err), "%s", err);
}
END_TEST

/* The folders the cuda backend looks in: $PROJD_TUNING_DIR alone when
 * set, else the three beside the binary; none that does not fit. */
START_TEST(table_folders)
{
    char dirs[PJ_TABLEPICK_DIRS][PJ_TABLEPICK_PATH];
    ck_assert_int_eq(pj_tablepick_dirs("/etc/pj", "/usr/bin", dirs), 1);
    ck_assert_str_eq(dirs[0], "/etc/pj");
    ck_assert_int_eq(pj_tablepick_dirs("", "/usr/bin", dirs), 3);
    ck_assert_str_eq(dirs[0], "/usr/bin/../share/projd/tuning");
    ck_assert_str_eq(dirs[1], "/usr/bin/../../config/tuning");
    ck_assert_str_eq(dirs[2], "/usr/bin/../config/tuning");
    ck_assert_int_eq(pj_tablepick_dirs(NULL, "", dirs), 0);
    static char longdir[PJ_TABLEPICK_PATH + 8];
    memset(longdir, 'a', sizeof longdir - 1);
    longdir[0] = '/';
    ck_assert_int_eq(pj_tablepick_dirs(longdir, "/usr/bin", dirs), 0);
    longdir[PJ_TABLEPICK_PATH - 10] = 0; /* fits alone, with no suffix */
    ck_assert_int_eq(pj_tablepick_dirs(NULL, longdir, dirs), 0);
    longdir[PJ_TABLEPICK_PATH - 20] = 0; /* with the shortest suffix only */
    ck_assert_int_eq(pj_tablepick_dirs(NULL, longdir, dirs), 1);
    ck_assert_str_eq(dirs[0] + strlen(longdir), "/../config/tuning");
}
END_TEST

static char g_skipped[4096];

static void note_skip(void *ctx, const char *path, const char *why)
{
    (void)ctx;
    const char *base = strrchr(path, '/');
    size_t l = strlen(g_skipped);
    snprintf(g_skipped + l, sizeof g_skipped - l, "%s: %s\n", base ? base + 1 : path, why);
}

/* A table of no entries made on device (sm SMs, compute capability cc;
 * NULL: the key left out, as projd-bench before session 50 wrote them). */
static void write_table_cc(const char *dir, const char *name, const char *device, int sm,
                           const char *cc)
{
    char p[600], text[300], ccs[64] = "";
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (cc)
        snprintf(ccs, sizeof ccs, "\"compute_capability\": \"%s\", ", cc);
    snprintf(text, sizeof text, "{\"device\": \"%s\", \"sm_count\": %d, %s\"entries\": []}", device,
             sm, ccs);
    ck_assert_int_eq(pj_fixture_write_text(p, text), 0);
}

static void write_table(const char *dir, const char *name, const char *device, int sm)
{
    write_table_cc(dir, name, device, sm, "9.0");
}

/* Which table pj_tablepick_nearest takes for device at sm SMs: its file
 * name ("" for none). */
static const char *pick_name(const char (*dirs)[PJ_TABLEPICK_PATH], int ndirs, const char *device,
                             int sm)
{
    static char path[PJ_TABLEPICK_PATH + 256];
    char dev[64];
    if (!pj_tablepick_nearest(dirs, ndirs, device, sm, 9, 0, path, sizeof path, dev, sizeof dev,
                              note_skip, NULL))
        return "";
    const char *base = strrchr(path, '/');
    return base ? base + 1 : path;
}

/* A GPU without a table of its name takes the installed one nearest by
 * device name (daemon/tablepick.h): its own model under another file name
 * first, then more leading words shared, the nearer SM count, the earlier
 * folder, the file name; what is not a readable regular file holding a
 * table that names a device is passed over, and said. */
START_TEST(nearest_table_by_device_name)
{
    ck_assert_int_eq(pj_tablepick_nearness("NVIDIA H100 PCIe", "NVIDIA H100 80GB HBM3"), 2);
    ck_assert_int_eq(pj_tablepick_nearness("NVIDIA H100 PCIe", "NVIDIA H200"), 1);
    ck_assert_int_eq(pj_tablepick_nearness("nvidia  h200-NVL", "NVIDIA H200"), 2);
    ck_assert_int_eq(pj_tablepick_nearness("NVIDIA H200", "NVIDIA H200"), 2);
    ck_assert_int_eq(pj_tablepick_nearness("AMD MI300X", "NVIDIA H200"), 0);
    ck_assert_int_eq(pj_tablepick_nearness("", "NVIDIA H200"), 0);

    char dirs[2][PJ_TABLEPICK_PATH] = {"/tmp/pjt-tables-XXXXXX", "/tmp/pjt-tables2-XXXXXX"};
    ck_assert_ptr_nonnull(mkdtemp(dirs[0]));
    ck_assert_ptr_nonnull(mkdtemp(dirs[1]));
    ck_assert_str_eq(pick_name(dirs, 1, "NVIDIA H200", 132), ""); /* empty */
    write_table(dirs[0], "b-h200.json", "NVIDIA H200", 132);
    write_table(dirs[0], "a-h100.json", "NVIDIA H100 80GB HBM3", 132);
    write_table(dirs[0], "c-h100nvl.json", "NVIDIA H100 NVL", 114);
    write_table(dirs[0], ".h100-pcie.json", "NVIDIA H100 PCIe", 114); /* hidden */
    write_table(dirs[0], "h100-pcie.txt", "NVIDIA H100 PCIe", 114);   /* not .json */
    char p[PJ_TABLEPICK_PATH + 64];
    snprintf(p, sizeof p, "%s/0-broken.json", dirs[0]);
    ck_assert_int_eq(pj_fixture_write_text(p, "{\"device\": \"NVIDIA H100 PCIe\", \"entries\": ["),
                     0);
    snprintf(p, sizeof p, "%s/1-nameless.json", dirs[0]);
    ck_assert_int_eq(pj_fixture_write_text(p, "{\"entries\": []}"), 0);
    snprintf(p, sizeof p, "%s/2-fifo.json", dirs[0]); /* opened, it would block */
    ck_assert_int_eq(mkfifo(p, 0600), 0);
    g_skipped[0] = 0;
    static const struct {
        const char *device;
        int sm;
        const char *want;
    } q[] = {
        {"NVIDIA H200 NVL", 132, "b-h200.json"},       /* two words */
        {"NVIDIA H100 PCIe", 114, "c-h100nvl.json"},   /* two words each; SMs */
        {"NVIDIA H100 PCIe", 132, "a-h100.json"},      /* two words each; SMs */
        {"NVIDIA H100 80GB HBM3", 114, "a-h100.json"}, /* its own model */
        {"NVIDIA GH200 480GB", 132, "a-h100.json"},    /* one word, SMs tie: name */
        {"Some Other GPU", 132, "a-h100.json"},        /* none near, SMs tie: name */
    };
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
        ck_assert_msg(!strcmp(pick_name(dirs, 1, q[i].device, q[i].sm), q[i].want),
                      "%s (%d SMs): took %s, not %s", q[i].device, q[i].sm,
                      pick_name(dirs, 1, q[i].device, q[i].sm), q[i].want);
    ck_assert_msg(strstr(g_skipped, "0-broken.json: not a tuning table") &&
                      strstr(g_skipped, "1-nameless.json: names no device") &&
                      strstr(g_skipped, "2-fifo.json: not a regular file") &&
                      !strstr(g_skipped, "h100-pcie"),
                  "passed over: %s", g_skipped);

    /* Another compute capability's table is never the nearest: "NVIDIA"
     * alone made an A100's as near to an H800 as any Hopper's, and its SM
     * count nearer. Nor is another model's that states none; this very
     * model's is taken without it. */
    write_table_cc(dirs[0], "0-a100.json", "NVIDIA A100-SXM4-80GB", 108, "8.0");
    write_table_cc(dirs[0], "0-h20-old.json", "NVIDIA H20", 78, NULL);
    g_skipped[0] = 0;
    ck_assert_str_eq(pick_name(dirs, 1, "NVIDIA H800 PCIe", 108), "c-h100nvl.json");
    ck_assert_str_eq(pick_name(dirs, 1, "NVIDIA H20", 78), "0-h20-old.json");
    ck_assert_str_eq(pick_name(dirs, 1, "NVIDIA H20 NVL", 78), "c-h100nvl.json");
    ck_assert_msg(
        strstr(g_skipped, "0-a100.json: made on compute capability 8.0, this GPU is 9.0") &&
            strstr(g_skipped, "0-h20-old.json: made on \"NVIDIA H20\" and states no "
                              "compute_capability"),
        "passed over: %s", g_skipped);
    snprintf(p, sizeof p, "%s/0-a100.json", dirs[0]);
    unlink(p);
    snprintf(p, sizeof p, "%s/0-h20-old.json", dirs[0]);
    unlink(p);

    /* Its own model under another name beats a longer name that starts
     * with it ("NVIDIA H200 NVL" shares both of "NVIDIA H200"'s words). */
    write_table(dirs[0], "a-h200nvl.json", "NVIDIA H200 NVL", 132);
    write_table(dirs[0], "z-my-h200.json", "NVIDIA H200", 132);
    ck_assert_str_eq(pick_name(dirs, 1, "NVIDIA H200", 132), "b-h200.json");
    snprintf(p, sizeof p, "%s/b-h200.json", dirs[0]);
    unlink(p);
    ck_assert_str_eq(pick_name(dirs, 1, "NVIDIA H200", 132), "z-my-h200.json");

    /* Nearest over every folder, not the first folder's nearest; the
     * earlier folder on a tie. */
    write_table(dirs[1], "h200-only.json", "NVIDIA H200", 132);
    const char(*rev)[PJ_TABLEPICK_PATH] = (const char(*)[PJ_TABLEPICK_PATH])dirs + 1;
    char two[2][PJ_TABLEPICK_PATH];
    snprintf(two[0], sizeof two[0], "%s", rev[0]);
    snprintf(two[1], sizeof two[1], "%s", dirs[0]);
    ck_assert_str_eq(pick_name(two, 2, "NVIDIA H100 PCIe", 132), "a-h100.json");
    ck_assert_str_eq(pick_name(two, 2, "NVIDIA H200", 132), "h200-only.json");
    ck_assert_str_eq(pick_name(dirs, 2, "NVIDIA H200", 132), "z-my-h200.json");

    /* A path that does not fit is passed over, not cut. */
    char small[20], dev[64];
    g_skipped[0] = 0;
    ck_assert_int_eq(pj_tablepick_nearest(dirs, 2, "NVIDIA H200", 132, 9, 0, small, sizeof small,
                                          dev, sizeof dev, note_skip, NULL),
                     0);
    ck_assert_msg(strstr(g_skipped, "its path is too long"), "passed over: %s", g_skipped);

    static const char *const names[] = {
        "b-h200.json",   "a-h100.json",     "c-h100nvl.json", ".h100-pcie.json", "h100-pcie.txt",
        "0-broken.json", "1-nameless.json", "2-fifo.json",    "a-h200nvl.json",  "z-my-h200.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dirs[0], names[i]);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/h200-only.json", dirs[1]);
    unlink(p);
    ck_assert_int_eq(rmdir(dirs[0]), 0);
    ck_assert_int_eq(rmdir(dirs[1]), 0);

    /* The shipped tables: the H100 models take the H100's, the H200's
     * take the H200's. */
    const char *src = getenv("PJ_SRCDIR") ? getenv("PJ_SRCDIR") : ".";
    char shipped[1][PJ_TABLEPICK_PATH];
    snprintf(shipped[0], sizeof shipped[0], "%s/config/tuning", src);
    ck_assert_str_eq(pick_name(shipped, 1, "NVIDIA H100 PCIe", 114), "h100-80gb-hbm3.json");
    ck_assert_str_eq(pick_name(shipped, 1, "NVIDIA H200 NVL", 132), "h200.json");
}
END_TEST

/* Entries "o" n 4096 k 2048 at m = 1.. count, each a cuBLAS entry, as
 * JSON text (malloc'd), with extra (may be "") spliced in before them. */
static char *table_of(int count, const char *extra)
{
    size_t cap = (size_t)count * 96 + strlen(extra) + 64;
    char *j = malloc(cap);
    ck_assert_ptr_nonnull(j);
    size_t at = (size_t)snprintf(j, cap, "{%s\"entries\":[", extra);
    for (int i = 0; i < count; i++)
        at += (size_t)snprintf(j + at, cap - at,
                               "%s{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":%d,"
                               "\"engine\":\"cublas\",\"knobs\":{\"algo\":1}}",
                               i ? "," : "", i + 1);
    snprintf(j + at, cap - at, "]}");
    return j;
}

/* A device check that refuses the entries at m = 1. */
static int drop_m1(void *ctx, const pj_tune_entry *e, char *why, size_t whylen)
{
    (void)ctx;
    if (e->m != 1)
        return 0;
    snprintf(why, whylen, "m=1: refused");
    return -ERANGE;
}

/* More entries than a table holds: the whole load fails, said,
 * rather than the rest being dropped one by one (a layer's ladder cut in
 * the middle routes its larger m to a smaller m's entry). */
START_TEST(a_table_too_large_is_not_half_applied)
{
    static pj_tune_table t;
    char err[256] = "";
    char *j = table_of(PJ_TUNE_MAX, "");
    ck_assert_int_eq(pj_tune_parse(j, strlen(j), &t, NULL, NULL, NULL, NULL, err, sizeof err),
                     PJ_TUNE_MAX);
    free(j);
    j = table_of(PJ_TUNE_MAX + 1, "");
    int n = pj_tune_parse(j, strlen(j), &t, NULL, NULL, NULL, NULL, err, sizeof err);
    free(j);
    ck_assert_int_eq(n, -ENOSPC);
    ck_assert_uint_eq(t.n, 0);
    ck_assert_msg(strstr(err, "more than 256 entries (entries[256]"), "%s", err);
    /* The same verdict with a device check that would drop one of them:
     * a load without the check (the daemon's first look, --check-config)
     * must not refuse what the vetted load takes, nor the other way. */
    j = table_of(PJ_TUNE_MAX + 1, "");
    n = pj_tune_parse(j, strlen(j), &t, drop_m1, NULL, NULL, NULL, err, sizeof err);
    free(j);
    ck_assert_int_eq(n, -ENOSPC);
}
END_TEST

/* A stray JSON file of many keys among the tables (a tokenizer's vocab)
 * is refused at once: the repeated-key scan is quadratic, and 100000 keys
 * took it ~30 s (the test's timeout fails it without the bound). */
START_TEST(many_keys_are_refused_at_once)
{
    static pj_tune_table t;
    char err[256] = "";
    const int nk = 100000;
    char *big = malloc((size_t)nk * 24 + 64);
    ck_assert_ptr_nonnull(big);
    size_t at = 0;
    for (int i = 0; i < nk; i++)
        at += (size_t)sprintf(big + at, "\"tok%d\":%d,", i, i);
    big[at] = 0;
    char *j = table_of(1, big);
    int n = pj_tune_parse(j, strlen(j), &t, NULL, NULL, on_msg, NULL, err, sizeof err);
    free(j);
    ck_assert_int_eq(n, -EINVAL);
    ck_assert_msg(strstr(err, "the top-level object has 100001 keys"), "%s", err);

    /* The same in one entry's knobs: that entry goes, the rest stay. */
    big[at - 1] = 0; /* the last comma */
    size_t cap = strlen(big) + 512;
    j = malloc(cap);
    ck_assert_ptr_nonnull(j);
    snprintf(j, cap,
             "{\"entries\":[{\"layer\":\"o\",\"m\":1,\"engine\":\"cublas\",\"knobs\":{%s}},"
             "{\"layer\":\"o\",\"m\":8,\"engine\":\"cublas\",\"knobs\":{\"algo\":1}}]}",
             big);
    n_msgs = 0;
    n = pj_tune_parse(j, strlen(j), &t, NULL, NULL, on_msg, NULL, err, sizeof err);
    free(j);
    free(big);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(n_msgs, 1);
    ck_assert_msg(strstr(last_msg, "\"knobs\" has 100000 keys"), "%s", last_msg);
}
END_TEST

/* A file of many bad entries says the first 32 and a count. */
START_TEST(rejections_are_said_up_to_a_count)
{
    static pj_tune_table t;
    char err[256] = "";
    char *j = table_of(100, "");
    /* every entry's engine made unknown */
    for (char *p = j; (p = strstr(p, "\"cublas\"")) != NULL; p += 8)
        memcpy(p, "\"cublaz\"", 8);
    n_msgs = 0;
    int n = pj_tune_parse(j, strlen(j), &t, NULL, NULL, on_msg, NULL, err, sizeof err);
    free(j);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(n_msgs, 33);
    ck_assert_msg(strstr(last_msg, "68 more entries rejected (the first 32 said)"), "%s", last_msg);
}
END_TEST

/* "compute_capability": read, written back, and refused unless "M.m". */
START_TEST(compute_capability_round_trips)
{
    static pj_tune_table t, u;
    char err[256] = "";
    char *j = table_of(1, "\"device\":\"NVIDIA H200\",\"compute_capability\":\"9.0\",");
    ck_assert_int_eq(pj_tune_parse(j, strlen(j), &t, NULL, NULL, NULL, NULL, err, sizeof err), 1);
    free(j);
    ck_assert_int_eq(t.cc_major, 9);
    ck_assert_int_eq(t.cc_minor, 0);
    char *out = pj_tune_to_json(&t, "c", "d");
    ck_assert_ptr_nonnull(out);
    ck_assert_msg(strstr(out, "\"compute_capability\":\t\"9.0\"") ||
                      strstr(out, "\"compute_capability\": \"9.0\""),
                  "%s", out);
    ck_assert_int_eq(pj_tune_parse(out, strlen(out), &u, NULL, NULL, NULL, NULL, err, sizeof err),
                     1);
    free(out);
    ck_assert_int_eq(u.cc_major, 9);
    static const char *const bad[] = {"\"9\"",   "\"9.0x\"", "9.0",      "\"x.y\"",
                                      "\"0.5\"", "\" 9.0\"", "\"9.-0\"", "\"+9.0\""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char extra[64];
        snprintf(extra, sizeof extra, "\"compute_capability\":%s,", bad[i]);
        j = table_of(1, extra);
        int n = pj_tune_parse(j, strlen(j), &t, NULL, NULL, NULL, NULL, err, sizeof err);
        free(j);
        ck_assert_msg(n == -EINVAL && strstr(err, "\"compute_capability\" must be a string like"),
                      "%s: %d %s", bad[i], n, err);
    }
}
END_TEST

/* A copy of an entry the device's check refused is a duplicate all the
 * same: the load with the check and the one without (--check-config, the
 * daemon's first look) keep the same entries and count the same. */
START_TEST(a_refused_entry_still_has_its_duplicates)
{
    static pj_tune_table t;
    char err[256] = "";
    static const char *j = "{\"entries\":["
                           "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":8,\"engine\":\"gemvz\","
                           "\"knobs\":{\"nw\":16}},"
                           "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":8,\"engine\":\"cublas\","
                           "\"knobs\":{\"algo\":1}},"
                           "{\"layer\":\"o\",\"n\":4096,\"k\":2048,\"m\":16,\"engine\":\"cublas\","
                           "\"knobs\":{\"algo\":0}}]}";
    n_msgs = 0;
    ck_assert_int_eq(pj_tune_parse(j, strlen(j), &t, NULL, NULL, on_msg, NULL, err, sizeof err), 2);
    ck_assert_int_eq(n_msgs, 1);
    ck_assert_msg(strstr(last_msg, "entries[1] rejected: o 4096x2048 m=8: duplicate entry"), "%s",
                  last_msg);
    n_msgs = 0;
    ck_assert_int_eq(
        pj_tune_parse(j, strlen(j), &t, stub_check, NULL, on_msg, NULL, err, sizeof err), 1);
    ck_assert_int_eq(n_msgs, 2);
    ck_assert_msg(strstr(last_msg, "entries[1] rejected: o 4096x2048 m=8: duplicate entry"), "%s",
                  last_msg);
    ck_assert_uint_eq(t.e[0].m, 16);

    /* and a full table with such a copy is full to both loads */
    char *big = table_of(PJ_TUNE_MAX, "");
    char *at = strstr(big, "\"entries\":[") + 11;
    size_t cap = strlen(big) + 256;
    char *j2 = malloc(cap);
    ck_assert_ptr_nonnull(j2);
    snprintf(j2, cap, "%.*s%s%s", (int)(at - big), big,
             "{\"layer\":\"zz\",\"n\":64,\"k\":64,\"m\":8,\"engine\":\"gemvz\","
             "\"knobs\":{\"nw\":16}},"
             "{\"layer\":\"zz\",\"n\":64,\"k\":64,\"m\":8,\"engine\":\"cublas\"},",
             at);
    free(big);
    int a = pj_tune_parse(j2, strlen(j2), &t, NULL, NULL, NULL, NULL, err, sizeof err);
    int b = pj_tune_parse(j2, strlen(j2), &t, stub_check, NULL, NULL, NULL, err, sizeof err);
    free(j2);
    ck_assert_int_eq(a, -ENOSPC);
    ck_assert_int_eq(b, -ENOSPC);
}
END_TEST

/* "device" and "sm_count" of the wrong kind fail the load: read as absent,
 * a table would be taken on any GPU, and the SM count places the nearest-
 * table search. */
START_TEST(device_and_sm_count_are_checked)
{
    static pj_tune_table t;
    char err[256] = "";
    static const char *const bad[] = {"\"device\":[\"NVIDIA H200\"],",
                                      "\"device\":null,",
                                      "\"device\":7,",
                                      "\"sm_count\":132.9,",
                                      "\"sm_count\":-5,",
                                      "\"sm_count\":4097,",
                                      "\"sm_count\":1e30,",
                                      "\"sm_count\":\"132\",",
                                      "\"sm_count\":null,"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *j = table_of(1, bad[i]);
        err[0] = 0;
        int n = pj_tune_parse(j, strlen(j), &t, NULL, NULL, NULL, NULL, err, sizeof err);
        free(j);
        const char *key = strstr(bad[i], "device") ? "\"device\" must be a string"
                                                   : "\"sm_count\" must be a whole number";
        ck_assert_msg(n == -EINVAL && strstr(err, key), "%s: %d %s", bad[i], n, err);
        ck_assert_uint_eq(t.n, 0);
    }
    char *j = table_of(1, "\"device\":\"NVIDIA H200\",\"sm_count\":132,");
    ck_assert_int_eq(pj_tune_parse(j, strlen(j), &t, NULL, NULL, NULL, NULL, err, sizeof err), 1);
    free(j);
    ck_assert_int_eq(t.sm_count, 132);
    ck_assert_str_eq(t.device, "NVIDIA H200");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dispatch");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, loads_good_table);
    tcase_add_test(tc, routes_to_nearest_entry);
    tcase_add_test(tc, rejects_bad_entries_one_by_one);
    tcase_add_test(tc, rejects_broken_files);
    tcase_add_test(tc, round_trips_through_json);
    tcase_add_test(tc, knob_strings);
    tcase_add_test(tc, cublas_explicit_configuration);
    tcase_add_test(tc, same_layer_two_shapes);
    tcase_add_test(tc, exact_shape_beats_any_shape);
    tcase_add_test(tc, rejects_text_after_the_table);
    tcase_add_test(tc, times_round_trip);
    tcase_add_test(tc, save_reports_and_keeps_the_old_table);
    tcase_add_test(tc, shipped_table_routes_every_m);
    tcase_add_test(tc, rows_of_a_row_prefix);
    tcase_add_test(tc, rejects_odd_keys);
    tcase_add_test(tc, refuses_what_cjson_misreads);
    tcase_add_test(tc, table_folders);
    tcase_add_test(tc, nearest_table_by_device_name);
    tcase_add_test(tc, a_table_too_large_is_not_half_applied);
    tcase_add_test(tc, many_keys_are_refused_at_once);
    tcase_add_test(tc, rejections_are_said_up_to_a_count);
    tcase_add_test(tc, compute_capability_round_trips);
    tcase_add_test(tc, a_refused_entry_still_has_its_duplicates);
    tcase_add_test(tc, device_and_sm_count_are_checked);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
