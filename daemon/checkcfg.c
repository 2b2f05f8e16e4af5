/* checkcfg.c — projd --check-config (checkcfg.h). */
#include "daemon/checkcfg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/backend.h"
#include "daemon/model.h"
#include "daemon/server.h"
#include "kernels/dispatch.h"
#include "protocol/sockpath.h"

/* A remark of --check-config that is no problem: stdout, in order with
 * the problems on stderr. */
static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
    va_list ap;
    fputs("projd: note: ", stdout);
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

/* ---- --check-config ---------------------------------------------------------------- */

/* One problem a start would stop on: one line on stderr, counted. */
static void problem(int *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(int *n, const char *fmt, ...)
{
    va_list ap;
    fputs("projd: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    (*n)++;
}

/* A socket directory that is not there: a start makes it (and what is
 * missing above it), then checks it; nothing is made here. */
static void check_missing_dir(const char *dir, mode_t mode, int *n)
{
    char err[1024];
    if (pj_sockpath_check_creatable(dir, err, sizeof err) != 0)
        problem(n, "%s", err);
    else
        note("socket dir %s does not exist; a start creates it (mode %04o)", dir, (unsigned)mode);
}

/* The directory the socket's file is made in: "" stands for "/" (a path
 * directly under it) or "." (a path without a slash). */
static const char *dir_of(const pj_socket_look *lk)
{
    if (lk->dir[0])
        return lk->dir;
    return lk->path[0] == '/' ? "/" : ".";
}

/* pj_server_check_socket without its probe, and the listener's check of a
 * directory it would create: nothing is created, probed or removed. */
static void check_socket(const char *url, int *n)
{
    pj_socket_look lk;
    char err[1024];
    if (pj_server_look_socket(url, &lk, err, sizeof err) != 0) {
        problem(n, "%s", err);
        return;
    }
    if (lk.dir_errno == ENOENT)
        check_missing_dir(lk.dir, pj_sockpath_dir_mode(url), n);
    else if (lk.dir_errno)
        problem(n, "socket dir %s: %s", lk.dir, strerror(lk.dir_errno));
    else if (faccessat(AT_FDCWD, dir_of(&lk), W_OK | X_OK, AT_EACCESS) != 0)
        /* The start makes the socket's lock file there before the load,
         * then the socket: both would fail. */
        problem(n,
                "socket dir %s: uid %u cannot create files there (%s): a start could make "
                "neither the socket nor its lock file (the check runs as its caller: run it "
                "as the daemon's user)",
                dir_of(&lk), (unsigned)geteuid(), strerror(errno));
    else if (lk.exists)
        note("socket %s exists; a start removes it when nobody answers there and stops when a "
             "daemon serves there (not probed here)",
             lk.path);
}

/* Listed uids and gids that neither own the socket nor share its group
 * are turned away by the file's mode before projd's own check sees them,
 * unless "other" may write it (a connect needs write permission alone).
 * A note: the configuration can still be what was meant. */
static void check_auth_reach(const pj_config *cfg, uint32_t gid)
{
    if (cfg->socket.mode & 0002)
        return;
    uint32_t outside_u = 0, outside_g = 0;
    for (uint32_t i = 0; i < cfg->auth.n_uids; i++)
        outside_u += cfg->auth.uids[i] != 0 && cfg->auth.uids[i] != (uint32_t)geteuid();
    for (uint32_t i = 0; i < cfg->auth.n_gids; i++)
        outside_g += cfg->auth.gids[i] != gid;
    if (outside_u + outside_g)
        note("auth lists %u uid%s and %u gid%s outside the socket's owner and group, but "
             "socket.mode %04o lets only those reach it: they are refused by the file's mode "
             "before projd checks them (a mode with o+w, \"0666\", lets them reach it; the lists "
             "still decide)",
             outside_u, outside_u == 1 ? "" : "s", outside_g, outside_g == 1 ? "" : "s",
             (unsigned)cfg->socket.mode);
}

/* 1 with *gid the group the socket will have (socket.group, else the
 * daemon's), 0 when socket.group cannot be used (said). */
static int check_group(const pj_config *cfg, uint32_t *gid, int *n)
{
    char err[1024];
    *gid = (uint32_t)getegid();
    int rc = pj_server_socket_group(cfg->socket.group, gid, err, sizeof err);
    if (rc != 0)
        problem(n, "%s", err);
    return rc != -ENOENT; /* a group this process may not give is still the socket's */
}

/* pj_model_check stops at the first problem; each layer checked on its
 * own finds the others (a problem of the file itself is said once). */
static void check_model(const pj_config *cfg, int *n)
{
    char first[1024], err[1024];
    if (pj_model_check(cfg, first, sizeof first) == 0)
        return;
    static char said[PJ_CFG_MAX_LAYERS][1024];
    uint32_t n_said = 0;
    int first_said = 0;
    pj_config *one = malloc(sizeof *one);
    for (uint32_t i = 0; one && i < cfg->model.n_layers; i++) {
        *one = *cfg;
        one->model.layers[0] = cfg->model.layers[i];
        one->model.n_layers = 1;
        if (pj_model_check(one, err, sizeof err) == 0)
            continue;
        int dup = 0;
        for (uint32_t j = 0; j < n_said && !dup; j++)
            dup = strcmp(said[j], err) == 0;
        if (dup)
            continue;
        snprintf(said[n_said++], sizeof said[0], "%s", err);
        first_said |= strcmp(err, first) == 0;
        problem(n, "model: %s", err);
    }
    free(one);
    if (!first_said) /* not about one layer (the layers together), or out of memory */
        problem(n, "model: %s", first);
}

/* What the loader drops (a bad entry, an unknown key) and the cuda
 * backend would warn of at its start, said now; the device's own checks of
 * each entry need the GPU and are not run here. ctx: non-NULL when the
 * cpu backend was chosen, which never reads the table. */
static void table_dropped(void *ctx, const char *msg)
{
    note("%s (tuning.table; %s)", msg,
         ctx ? "the cpu backend does not read the table"
             : "the cuda backend's start says so too, and goes on");
}

/* tuning.table, when set, must read and parse: the cuda backend refuses
 * to start on one it cannot use (backend_cuda.c, load_table). The cpu
 * backend never reads it: a note there. Entries the loader drops are
 * notes (a start goes on without them). ops: the backend chosen, or NULL
 * when none could be. */
static void check_table(const pj_config *cfg, const pj_backend_ops *ops, int *n)
{
    if (!cfg->tuning.table[0])
        return;
    pj_tune_table *t = calloc(1, sizeof *t);
    char err[512];
    if (!t) {
        problem(n, "tuning.table: out of memory");
        return;
    }
    /* The device's check needs the GPU; its shape refusal does not. */
    int cpu = ops && strcmp(ops->name, "cpu") == 0;
    int rc = pj_tune_load(cfg->tuning.table, t, pj_tune_entry_has_shape, NULL, table_dropped,
                          cpu ? &cpu : NULL, err, sizeof err);
    free(t);
    /* No entry left, whether none was usable or the file lists none. */
    if (rc == 0)
        note("tuning.table %s: no entry usable: the cuda backend would run the untuned ladder",
             cfg->tuning.table);
    if (rc >= 0)
        return;
    if (cpu)
        note("%s (tuning.table; the cpu backend does not read it)", err);
    else
        problem(n, "%s (tuning.table)", err);
}

int pj_checkcfg_run(const pj_config *cfg, const char *config_file, const char *url,
                    const char *url_src)
{
    int n = 0;
    char err[1024], why[512] = "";
    const pj_backend_ops *ops = NULL;
    const int selected =
        pj_backend_select(cfg->device.backend, &ops, why, sizeof why, err, sizeof err) == 0;
    char said[1000];
    if (!selected)
        problem(&n, "%s", err);
    else if (pj_backend_cpu_ignores(cfg, ops, why, said, sizeof said))
        note("%s (device.backend \"cuda\" refuses a start without the GPU)", said);
    else if (pj_backend_check_device(ops, cfg, err, sizeof err) != 0)
        problem(&n, "backend %s: %s", ops->name, err);
    check_socket(url, &n);
    uint32_t gid;
    if (check_group(cfg, &gid, &n))
        check_auth_reach(cfg, gid);
    check_model(cfg, &n);
    check_table(cfg, selected ? ops : NULL, &n);
    if (n) {
        fprintf(stderr, "projd: %d problem%s: a start would fail\n", n, n == 1 ? "" : "s");
        return 1;
    }
    printf("projd: configuration OK (%s; model %s, %u layers; socket %s (%s); backend %s)\n",
           config_file ? config_file : "defaults", cfg->model.path, cfg->model.n_layers, url,
           url_src, why);
    return 0;
}
