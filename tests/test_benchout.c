/* test_benchout.c — projd-bench's arithmetic and result files without a GPU
 * (kernels/benchout.h): medians, the sums per load and the score, the
 * bootstrap's pairing, and files written whole, with what the JSON and the
 * markdown say of shapes that fell back or were wrong after their replays. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "kernels/benchout.h"
#include "tests/helpers/fixture.h"

#define NL   2
#define NM   3
#define REPS 41

static float g_tb[NL * NM][REPS], g_to[NL * NM][REPS];
static pj_bo_shape g_sh[NL * NM];
static pj_bo_run g_run;

/* A deterministic spread of values around v (+-20 %). */
static float spread(float v, int i, int salt)
{
    unsigned h = (unsigned)i * 2654435761u + (unsigned)salt * 40503u;
    return v * (0.8f + 0.4f * (float)(h % 1000u) / 999.0f);
}

/* NL layers x NM loads; shape (mi, li) has baseline ~ 10 (mi + 1) and ours
 * ~ 10 (mi + 1) / (1 + li + mi), both spread. */
static void make_run(void)
{
    memset(&g_run, 0, sizeof g_run);
    snprintf(g_run.device, sizeof g_run.device, "Test GPU");
    g_run.sm_count = 132;
    snprintf(g_run.date, sizeof g_run.date, "2026-12-07T00:00:00Z");
    g_run.commit = "abc1234";
    g_run.reps = REPS;
    g_run.seed = 7;
    g_run.primed = 1;
    g_run.flush_kind = 1;
    g_run.flush_carveout = -1;
    g_run.ingraph = 1;
    g_run.nl = NL;
    g_run.nm = NM;
    const uint32_t ms[NM] = {1, 32, 256};
    for (int mi = 0; mi < NM; mi++)
        g_run.m[mi] = ms[mi];
    float scr[REPS];
    for (int mi = 0; mi < NM; mi++)
        for (int li = 0; li < NL; li++) {
            const int si = mi * NL + li;
            pj_bo_shape *s = &g_sh[si];
            memset(s, 0, sizeof *s);
            snprintf(s->layer, sizeof s->layer, "layer%d", li);
            s->m = ms[mi];
            s->n = 1024;
            s->k = 4096;
            snprintf(s->engine, sizeof s->engine, "gemv");
            snprintf(s->chosen, sizeof s->chosen, "gemv");
            snprintf(s->knobs, sizeof s->knobs, "nw=4");
            s->step = 1;
            s->valid = 1;
            s->after_ok = 1;
            for (int r = 0; r < REPS; r++) {
                g_tb[si][r] = spread(10.0f * (mi + 1), r, si);
                g_to[si][r] = spread(10.0f * (mi + 1) / (float)(1 + li + mi), r, si + 100);
            }
            s->tb = g_tb[si];
            s->to = g_to[si];
            s->base_us = pj_bo_median(s->tb, REPS, scr);
            s->ours_us = pj_bo_median(s->to, REPS, scr);
            s->bytes = 8u << 20;
            s->floor_us = 0.8f * s->ours_us;
            for (int v = 0; v < PJ_BO_FLOORS; v++)
                s->floor_var[v] = s->floor_us + (float)v;
            s->lt_plan = 1;
            s->gemmex_us = s->base_us;
            s->lt_us = s->base_us + 1;
        }
}

START_TEST(median_of_odd_and_even_counts)
{
    float scr[8];
    const float odd[5] = {5, 1, 4, 2, 3};
    ck_assert_float_eq(pj_bo_median(odd, 5, scr), 3.0f);
    const float even[6] = {6, 1, 5, 2, 4, 3};
    ck_assert_float_eq(pj_bo_median(even, 6, scr), 3.5f);
    ck_assert_float_eq(odd[0], 5.0f); /* the input is not sorted in place */
    const float one[1] = {9};
    ck_assert_float_eq(pj_bo_median(one, 1, scr), 9.0f);
}
END_TEST

START_TEST(score_is_the_geometric_mean_of_the_loads)
{
    make_run();
    pj_bo_score sc;
    ck_assert_int_eq(pj_bo_score_run(&g_run, g_sh, PJ_BO_BOOTS, 99, &sc), 0);
    double logs = 0;
    for (int mi = 0; mi < NM; mi++) {
        double b = 0, o = 0;
        for (int li = 0; li < NL; li++) {
            b += g_sh[mi * NL + li].base_us;
            o += g_sh[mi * NL + li].ours_us;
        }
        ck_assert_double_eq_tol(sc.base_sum[mi], b, 1e-9);
        ck_assert_double_eq_tol(sc.ours_sum[mi], o, 1e-9);
        ck_assert_double_eq_tol(sc.speedup[mi], b / o, 1e-12);
        logs += log(b / o);
    }
    ck_assert_double_eq_tol(sc.score, exp(logs / NM), 1e-12);
    /* Loads sped up 1.5-3x here: the score is well above 1, and the
     * interval of noisy samples holds it and has some width. */
    ck_assert(sc.score > 1.5);
    ck_assert_msg(sc.lo <= sc.score && sc.score <= sc.hi, "%g not in %g..%g", sc.score, sc.lo,
                  sc.hi);
    ck_assert(sc.lo < sc.hi);
    /* One seed, one interval. */
    pj_bo_score again;
    ck_assert_int_eq(pj_bo_score_run(&g_run, g_sh, PJ_BO_BOOTS, 99, &again), 0);
    ck_assert(again.lo == sc.lo && again.hi == sc.hi);
}
END_TEST

/* Ours exactly half the baseline in every round, the rounds themselves
 * far apart: resampled in pairs, every resample's speedup is exactly 2,
 * so the interval has no width. Baseline and ours drawn apart would give
 * ratios of unrelated rounds, and a wide interval. */
START_TEST(bootstrap_resamples_rounds_in_pairs)
{
    make_run();
    float scr[REPS];
    for (int si = 0; si < NL * NM; si++) {
        for (int r = 0; r < REPS; r++) {
            g_to[si][r] = 1.0f + (float)((r * 17) % REPS);
            g_tb[si][r] = 2.0f * g_to[si][r];
        }
        g_sh[si].base_us = pj_bo_median(g_tb[si], REPS, scr);
        g_sh[si].ours_us = pj_bo_median(g_to[si], REPS, scr);
    }
    pj_bo_score sc;
    ck_assert_int_eq(pj_bo_score_run(&g_run, g_sh, PJ_BO_BOOTS, 5, &sc), 0);
    ck_assert_double_eq_tol(sc.score, 2.0, 1e-12);
    ck_assert_double_eq_tol(sc.lo, 2.0, 1e-12);
    ck_assert_double_eq_tol(sc.hi, 2.0, 1e-12);
}
END_TEST

START_TEST(score_refuses_what_it_cannot_compute)
{
    make_run();
    pj_bo_score sc;
    g_run.reps = 0;
    ck_assert_int_eq(pj_bo_score_run(&g_run, g_sh, PJ_BO_BOOTS, 1, &sc), -EINVAL);
    g_run.reps = REPS;
    ck_assert_int_eq(pj_bo_score_run(&g_run, g_sh, PJ_BO_BOOTS, 0, &sc), -EINVAL);
    ck_assert_int_eq(pj_bo_score_run(&g_run, g_sh, 10, 1, &sc), -EINVAL);
    g_run.nm = PJ_BO_MAX_LOADS + 1;
    ck_assert_int_eq(pj_bo_score_run(&g_run, g_sh, PJ_BO_BOOTS, 1, &sc), -EINVAL);
}
END_TEST

START_TEST(loads_are_named_by_model)
{
    make_run();
    char n[32];
    pj_bo_load_name(&g_run, 0, n, sizeof n);
    ck_assert_str_eq(n, "decode 1");
    pj_bo_load_name(&g_run, 1, n, sizeof n);
    ck_assert_str_eq(n, "decode 32");
    pj_bo_load_name(&g_run, 2, n, sizeof n);
    ck_assert_str_eq(n, "verify 256");
    g_run.own_model = 1;
    pj_bo_load_name(&g_run, 2, n, sizeof n);
    ck_assert_str_eq(n, "m 256");
}
END_TEST

/* A fresh folder of the test's, opened as projd-bench opens --out. */
static int out_dir(const char *name, char *path, size_t cap)
{
    pj_fixture_path(path, cap, name);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    ck_assert_int_ge(fd, 0);
    return fd;
}

static cJSON *read_json(const char *dir, const char *name)
{
    static char buf[1 << 20];
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ck_assert_int_gt(pj_fixture_read_text(path, buf, sizeof buf), 0);
    cJSON *j = cJSON_Parse(buf);
    ck_assert_ptr_nonnull(j);
    return j;
}

/* Names in dir containing ".tmp.": temporaries a write left. */
static int temporaries_in(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

static long lines_of(const char *path)
{
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    long n = 0;
    for (int c; (c = fgetc(f)) != EOF;)
        n += c == '\n';
    fclose(f);
    return n;
}

START_TEST(files_say_what_was_timed)
{
    make_run();
    /* Shape (0, 1) fell back from a table's gemvz entry that failed
     * validation; shape (2, 0) was wrong after its replays. */
    pj_bo_shape *fell = &g_sh[1], *wrong = &g_sh[4];
    fell->valid = 0;
    snprintf(fell->chosen, sizeof fell->chosen, "gemvz");
    snprintf(fell->engine, sizeof fell->engine, "cublas");
    snprintf(fell->why, sizeof fell->why, "3 outputs outside the bound");
    fell->step = 3;
    wrong->after_ok = 0;
    snprintf(wrong->after_why, sizeof wrong->after_why, "7 unwritten after 41 timed rounds");
    g_run.table = "config/tuning/h200.json";
    pj_bo_score sc;
    ck_assert_int_eq(pj_bo_score_run(&g_run, g_sh, PJ_BO_BOOTS, 3, &sc), 0);
    char dir[4200], err[4400] = "";
    int fd = out_dir("files", dir, sizeof dir);
    ck_assert_msg(pj_bo_write(fd, dir, &g_run, g_sh, &sc, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(temporaries_in(dir), 0);

    cJSON *j = read_json(dir, "bench.json");
    ck_assert_double_eq_tol(cJSON_GetObjectItem(j, "score")->valuedouble, sc.score, 1e-9);
    ck_assert_double_eq_tol(cJSON_GetObjectItem(j, "score_ci_lo")->valuedouble, sc.lo, 1e-9);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "config")));
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "flush_carveout")));
    ck_assert_int_eq(cJSON_GetObjectItem(j, "seed")->valueint, 7);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "timing")->valuestring, "events inside the graph");
    ck_assert_str_eq(cJSON_GetObjectItem(j, "table")->valuestring, "config/tuning/h200.json");
    cJSON *shapes = cJSON_GetObjectItem(j, "shapes");
    ck_assert_int_eq(cJSON_GetArraySize(shapes), NL * NM);
    for (int si = 0; si < NL * NM; si++) {
        cJSON *o = cJSON_GetArrayItem(shapes, si);
        const pj_bo_shape *s = &g_sh[si];
        ck_assert_str_eq(cJSON_GetObjectItem(o, "layer")->valuestring, s->layer);
        ck_assert_int_eq(cJSON_GetObjectItem(o, "m")->valueint, (int)s->m);
        ck_assert_double_eq_tol(cJSON_GetObjectItem(o, "speedup")->valuedouble,
                                (double)s->base_us / s->ours_us, 1e-6);
        ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o, "floor_variants_us")),
                         PJ_BO_FLOORS);
        ck_assert(cJSON_IsBool(cJSON_GetObjectItem(o, "correct_after_replays")));
        ck_assert_int_eq(cJSON_IsTrue(cJSON_GetObjectItem(o, "correct_after_replays")),
                         s->after_ok);
        ck_assert_int_eq(cJSON_HasObjectItem(o, "after_replays_reason"), !s->after_ok);
        ck_assert_int_eq(cJSON_HasObjectItem(o, "invalid_reason"), !s->valid);
        ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(o, "lt_plan")));
    }
    cJSON *fo = cJSON_GetArrayItem(shapes, 1);
    ck_assert_str_eq(cJSON_GetObjectItem(fo, "engine")->valuestring, "cublas");
    ck_assert_str_eq(cJSON_GetObjectItem(fo, "chosen_engine")->valuestring, "gemvz");
    ck_assert_int_eq(cJSON_GetObjectItem(fo, "ladder_step")->valueint, 3);
    ck_assert_str_eq(cJSON_GetObjectItem(fo, "invalid_reason")->valuestring,
                     "3 outputs outside the bound");
    cJSON *loads = cJSON_GetObjectItem(j, "loads");
    ck_assert_int_eq(cJSON_GetArraySize(loads), NM);
    ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(loads, 2), "load")->valuestring,
                     "verify 256");
    ck_assert_double_eq_tol(
        cJSON_GetObjectItem(cJSON_GetArrayItem(loads, 1), "base_us")->valuedouble, sc.base_sum[1],
        1e-9);
    cJSON_Delete(j);

    static char md[1 << 16];
    char path[4400];
    snprintf(path, sizeof path, "%s/bench.md", dir);
    ck_assert_int_gt(pj_fixture_read_text(path, md, sizeof md), 0);
    ck_assert_msg(strstr(md, "| layer1 | 1 | cublas (fell back from gemvz) |"), "%s", md);
    ck_assert(strstr(md, "**wrong after replays**"));
    ck_assert(strstr(md, "1 shape(s) ran cuBLAS because the chosen engine failed validation"));
    ck_assert(strstr(md, "**1 shape(s) gave a wrong result after their timed replays**"));
    ck_assert(strstr(md, "Timing: events inside the graph; flush: a read with plain loads"));
    ck_assert(strstr(md, "generated weights, seed 7"));
    char want[128];
    snprintf(want, sizeof want, "%.3f×", sc.score);
    ck_assert_msg(strstr(md, want), "no %s in the markdown", want);

    /* Every paired round, the baseline first in even rounds. */
    snprintf(path, sizeof path, "%s/samples.csv", dir);
    ck_assert_int_eq(lines_of(path), 1 + NL * NM * REPS);
    static char csv[1 << 20];
    ck_assert_int_gt(pj_fixture_read_text(path, csv, sizeof csv), 0);
    char row[128];
    snprintf(row, sizeof row, "\nlayer0,1,0,base,%.3f,%.3f\nlayer0,1,1,ours,%.3f,%.3f\n",
             g_tb[0][0], g_to[0][0], g_tb[0][1], g_to[0][1]);
    ck_assert_msg(strstr(csv, row), "no rows %s", row);
    snprintf(path, sizeof path, "%s/speedups.dat", dir);
    ck_assert_int_eq(lines_of(path), 1 + NL * NM);
    close(fd);
}
END_TEST

/* A file that cannot be written whole (here: the process's file size
 * limit) fails the write with the file, the step and the cause named, and
 * leaves the earlier file and no temporary. */
START_TEST(failed_write_keeps_the_earlier_file)
{
    make_run();
    pj_bo_score sc;
    ck_assert_int_eq(pj_bo_score_run(&g_run, g_sh, PJ_BO_BOOTS, 3, &sc), 0);
    char dir[4200], path[4400];
    int fd = out_dir("limited", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/bench.json", dir);
    ck_assert_int_eq(pj_fixture_write_text(path, "the earlier run\n"), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct rlimit rl = {512, 512};
        signal(SIGXFSZ, SIG_IGN);
        if (setrlimit(RLIMIT_FSIZE, &rl))
            _exit(3);
        char err[4400] = "";
        int rc = pj_bo_write(fd, dir, &g_run, g_sh, &sc, err, sizeof err);
        if (rc != -EFBIG && rc != -EIO)
            _exit(4);
        _exit(strstr(err, "bench.json: cannot write") && strstr(err, dir) ? 0 : 5);
    }
    int wst;
    ck_assert_int_eq(waitpid(pid, &wst, 0), pid);
    ck_assert_msg(WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "child status %d", wst);
    static char buf[256];
    pj_fixture_read_text(path, buf, sizeof buf);
    ck_assert_str_eq(buf, "the earlier run\n");
    ck_assert_int_eq(temporaries_in(dir), 0);
    close(fd);
}
END_TEST

/* A symbolic link left in the folder under a result's name is replaced,
 * not followed: the file it names is untouched. */
START_TEST(links_in_the_folder_are_not_followed)
{
    make_run();
    pj_bo_score sc;
    ck_assert_int_eq(pj_bo_score_run(&g_run, g_sh, PJ_BO_BOOTS, 3, &sc), 0);
    char dir[4200], victim[4200], link[4400], err[4400] = "";
    int fd = out_dir("links", dir, sizeof dir);
    pj_fixture_path(victim, sizeof victim, "victim.txt");
    ck_assert_int_eq(pj_fixture_write_text(victim, "keep me\n"), 0);
    snprintf(link, sizeof link, "%s/bench.md", dir);
    ck_assert_int_eq(symlink(victim, link), 0);
    ck_assert_msg(pj_bo_write(fd, dir, &g_run, g_sh, &sc, err, sizeof err) == 0, "%s", err);
    static char buf[64];
    pj_fixture_read_text(victim, buf, sizeof buf);
    ck_assert_str_eq(buf, "keep me\n");
    struct stat st;
    ck_assert_int_eq(lstat(link, &st), 0);
    ck_assert(S_ISREG(st.st_mode));
    close(fd);
}
END_TEST

START_TEST(clear_removes_only_the_results)
{
    char dir[4200], path[4400], err[4400] = "";
    int fd = out_dir("clear", dir, sizeof dir);
    const char *names[] = {"bench.json", "bench.md", "samples.csv", "speedups.dat", "tune_log.csv"};
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        ck_assert_int_eq(pj_fixture_write_text(path, "x\n"), 0);
    }
    ck_assert_msg(pj_bo_clear(fd, dir, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        ck_assert_int_eq(access(path, F_OK) == 0, i == 4);
    }
    /* Nothing there: nothing to do. */
    ck_assert_int_eq(pj_bo_clear(fd, dir, err, sizeof err), 0);
    /* One that cannot be removed is said, by name. */
    snprintf(path, sizeof path, "%s/bench.md", dir);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    ck_assert_int_lt(pj_bo_clear(fd, dir, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "bench.md: cannot remove an earlier run's file"), "%s", err);
    close(fd);
}
END_TEST

START_TEST(printed_tables_end_with_the_score)
{
    make_run();
    g_sh[2].after_ok = 0;
    pj_bo_score sc;
    ck_assert_int_eq(pj_bo_score_run(&g_run, g_sh, PJ_BO_BOOTS, 3, &sc), 0);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    pj_bo_print(f, &g_run, g_sh, &sc);
    fclose(f);
    char want[96];
    snprintf(want, sizeof want, "SCORE %.3f  (95%% CI %.3f-%.3f)\n", sc.score, sc.lo, sc.hi);
    ck_assert_msg(len > strlen(want) && !strcmp(text + len - strlen(want), want), "%s", text);
    ck_assert(strstr(text, "WRONG after replays"));
    ck_assert(strstr(text, "decode 32"));
    free(text);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("benchout");
    TCase *tc = tcase_create("benchout");
    tcase_add_test(tc, median_of_odd_and_even_counts);
    tcase_add_test(tc, score_is_the_geometric_mean_of_the_loads);
    tcase_add_test(tc, bootstrap_resamples_rounds_in_pairs);
    tcase_add_test(tc, score_refuses_what_it_cannot_compute);
    tcase_add_test(tc, loads_are_named_by_model);
    tcase_add_test(tc, files_say_what_was_timed);
    tcase_add_test(tc, failed_write_keeps_the_earlier_file);
    tcase_add_test(tc, links_in_the_folder_are_not_followed);
    tcase_add_test(tc, clear_removes_only_the_results);
    tcase_add_test(tc, printed_tables_end_with_the_score);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
