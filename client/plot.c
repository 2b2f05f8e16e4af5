/* plot.c — write plot data and gnuplot scripts, run gnuplot when present. */
#include "client/plot.h"

#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int pj_plot_have_gnuplot(void)
{
    const char *path = getenv("PATH");
    if (!path || !path[0])
        path = "/usr/local/bin:/usr/bin:/bin";
    char dir[4096];
    while (*path) {
        size_t len = strcspn(path, ":");
        if (len > 0 && len < sizeof dir - 16) {
            snprintf(dir, sizeof dir, "%.*s/gnuplot", (int)len, path);
            if (access(dir, X_OK) == 0)
                return 1;
        }
        path += len;
        if (*path == ':')
            path++;
    }
    return 0;
}

static int make_dir(const char *dir, char *msg, size_t msglen)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        int e = errno;
        snprintf(msg, msglen, "plot: cannot create %s: %s", dir, strerror(e));
        return -e;
    }
    return 0;
}

static FILE *open_in(const char *dir, const char *name, char *path, size_t cap, char *msg,
                     size_t msglen)
{
    snprintf(path, cap, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        snprintf(msg, msglen, "plot: cannot write %s: %s", path, strerror(errno));
    return f;
}

static int close_checked(FILE *f, const char *path, char *msg, size_t msglen)
{
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        snprintf(msg, msglen, "plot: error writing %s", path);
        return -EIO;
    }
    return 0;
}

/* A file-name-safe copy of a label ("nng c=4" -> "nng_c4"). */
static void safe_name(const char *label, char *out, size_t cap)
{
    size_t j = 0;
    for (const char *p = label; *p && j + 1 < cap; p++) {
        char c = *p;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '.')
            out[j++] = c;
        else if (c == ' ' || c == '_')
            out[j++] = '_';
    }
    out[j] = '\0';
}

/* Runs gnuplot on the script; 1 when it drew, 0 when gnuplot is missing,
 * -EIO when it failed. */
static int run_gnuplot(const char *script, const char *png, char *msg, size_t msglen)
{
    if (!pj_plot_have_gnuplot()) {
        snprintf(msg, msglen, "plot: gnuplot not found in PATH; skipped %s (data and %s written)",
                 png, script);
        return 0;
    }
    char *argv[] = {"gnuplot", (char *)script, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ);
    if (rc != 0) {
        snprintf(msg, msglen, "plot: cannot run gnuplot: %s", strerror(rc));
        return -rc;
    }
    int st;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            snprintf(msg, msglen, "plot: waiting for gnuplot: %s", strerror(errno));
            return -EIO;
        }
    }
    struct stat sb;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || stat(png, &sb) != 0 || sb.st_size == 0) {
        snprintf(msg, msglen, "plot: gnuplot failed on %s (exit status %d)", script,
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return -EIO;
    }
    snprintf(msg, msglen, "plot: wrote %s", png);
    return 1;
}

int pj_plot_latency_cdf(const char *dir, const pj_plot_series *s, size_t n, char *msg,
                        size_t msglen)
{
    int rc = make_dir(dir, msg, msglen);
    if (rc)
        return rc;
    char path[4096], gp[4096], png[4096], name[128];
    FILE *g = open_in(dir, "latency_cdf.gp", gp, sizeof gp, msg, msglen);
    if (!g)
        return -EIO;
    snprintf(png, sizeof png, "%s/latency_cdf.png", dir);
    fprintf(g,
            "set terminal pngcairo size 1000,640 noenhanced\n"
            "set output '%s/latency_cdf.png'\n"
            "set title 'projload: request latency CDF'\n"
            "set xlabel 'latency (us)'\nset ylabel 'fraction of requests'\n"
            "set logscale x\nset grid\nset key bottom right\nset yrange [0:1]\n",
            dir);
    int drawn = 0;
    for (size_t i = 0; i < n; i++) {
        if (!s[i].lat->count)
            continue;
        safe_name(s[i].label, name, sizeof name);
        char file[256];
        snprintf(file, sizeof file, "latency_cdf_%s.dat", name);
        FILE *f = open_in(dir, file, path, sizeof path, msg, msglen);
        if (!f) {
            fclose(g);
            return -EIO;
        }
        fprintf(f, "# latency_us cumulative_fraction (%s)\n", s[i].label);
        pj_ls_hist_write_cdf(s[i].lat, f, 1e3);
        if ((rc = close_checked(f, path, msg, msglen))) {
            fclose(g);
            return rc;
        }
        fprintf(g, "%s '%s/%s' using 1:2 with steps lw 2 title '%s'",
                drawn ? ", \\\n    " : "plot ", dir, file, s[i].label);
        drawn++;
    }
    if (!drawn)
        fprintf(g, "plot 0 notitle\n");
    fputc('\n', g);
    if ((rc = close_checked(g, gp, msg, msglen)))
        return rc;
    return run_gnuplot(gp, png, msg, msglen);
}

int pj_plot_sweep(const char *dir, const pj_plot_sweep_point *p, size_t n, char *msg, size_t msglen)
{
    int rc = make_dir(dir, msg, msglen);
    if (rc)
        return rc;
    char dat[4096], gp[4096], png[4096];
    FILE *f = open_in(dir, "sweep.dat", dat, sizeof dat, msg, msglen);
    if (!f)
        return -EIO;
    fprintf(f, "# concurrency req_per_s ops_per_s p50_us p99_us\n");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%u %.3f %.3f %.3f %.3f\n", p[i].concurrency, p[i].req_per_s, p[i].ops_per_s,
                p[i].p50_us, p[i].p99_us);
    if ((rc = close_checked(f, dat, msg, msglen)))
        return rc;
    FILE *g = open_in(dir, "sweep.gp", gp, sizeof gp, msg, msglen);
    if (!g)
        return -EIO;
    snprintf(png, sizeof png, "%s/sweep.png", dir);
    fprintf(g,
            "set terminal pngcairo size 1000,640 noenhanced\n"
            "set output '%s'\n"
            "set title 'projload: throughput and latency vs concurrency (closed loop)'\n"
            "set xlabel 'concurrent clients'\nset logscale x 2\nset grid\n"
            "set ylabel 'requests/s'\nset y2label 'latency (us)'\n"
            "set ytics nomirror\nset y2tics\nset key top left\nset yrange [0:*]\n"
            "set y2range [0:*]\n"
            "plot '%s' using 1:2 with linespoints lw 2 title 'req/s', \\\n"
            "     '%s' using 1:4 axes x1y2 with linespoints dt 2 title 'p50 (us)', \\\n"
            "     '%s' using 1:5 axes x1y2 with linespoints dt 3 title 'p99 (us)'\n",
            png, dat, dat, dat);
    if ((rc = close_checked(g, gp, msg, msglen)))
        return rc;
    return run_gnuplot(gp, png, msg, msglen);
}
