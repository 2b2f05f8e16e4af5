/* tablepick.c — see tablepick.h. */
#include "daemon/tablepick.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dispatch.h"

int pj_tablepick_dirs(const char *env, const char *exe_dir,
                      char dirs[PJ_TABLEPICK_DIRS][PJ_TABLEPICK_PATH])
{
    if (env && *env)
        return snprintf(dirs[0], PJ_TABLEPICK_PATH, "%s", env) < PJ_TABLEPICK_PATH;
    static const char *const rel[PJ_TABLEPICK_DIRS] = {"../share/projd/tuning",
                                                       "../../config/tuning", "../config/tuning"};
    int n = 0;
    for (int i = 0; exe_dir && *exe_dir && i < PJ_TABLEPICK_DIRS; i++)
        if (snprintf(dirs[n], PJ_TABLEPICK_PATH, "%s/%s", exe_dir, rel[i]) < PJ_TABLEPICK_PATH)
            n++;
    return n;
}

/* The next word of *s (a run of letters and digits), lower-cased into w;
 * 0 at the end. */
static int next_word(const char **s, char *w, size_t cap)
{
    const char *p = *s;
    while (*p && !isalnum((unsigned char)*p))
        p++;
    size_t n = 0;
    while (*p && isalnum((unsigned char)*p)) {
        if (n + 1 < cap)
            w[n++] = (char)tolower((unsigned char)*p);
        p++;
    }
    w[n] = 0;
    *s = p;
    return n > 0;
}

int pj_tablepick_nearness(const char *device, const char *table_device)
{
    const char *a = device, *b = table_device;
    char wa[64], wb[64];
    int n = 0;
    while (next_word(&a, wa, sizeof wa) && next_word(&b, wb, sizeof wb) && !strcmp(wa, wb))
        n++;
    return n;
}

/* The same words, all of them ("NVIDIA H200" and "nvidia h200"). */
static int same_words(const char *a, const char *b)
{
    char wa[64], wb[64];
    for (;;) {
        int ha = next_word(&a, wa, sizeof wa), hb = next_word(&b, wb, sizeof wb);
        if (ha != hb || (ha && strcmp(wa, wb)))
            return 0;
        if (!ha)
            return 1;
    }
}

static int is_json_name(const char *name)
{
    size_t l = strlen(name);
    return l > 5 && name[0] != '.' && !strcmp(name + l - 5, ".json");
}

typedef struct pick {
    int found, exact, near, dir;
    long long gap;
    char name[256];
} pick;

/* Is c nearer than b (the order of pj_tablepick_nearest)? */
static int nearer(const pick *c, const pick *b)
{
    if (!b->found)
        return 1;
    if (c->exact != b->exact)
        return c->exact > b->exact;
    if (c->near != b->near)
        return c->near > b->near;
    if (c->gap != b->gap)
        return c->gap < b->gap;
    if (c->dir != b->dir)
        return c->dir < b->dir;
    return strcmp(c->name, b->name) < 0; /* readdir's order is the file system's */
}

int pj_tablepick_nearest(const char (*dirs)[PJ_TABLEPICK_PATH], int ndirs, const char *device,
                         int sm_count, int cc_major, int cc_minor, char *path, size_t pathlen,
                         char *table_device, size_t devlen, pj_tablepick_skip_fn skip, void *ctx)
{
    pj_tune_table *t = malloc(sizeof *t); /* PJ_TUNE_MAX entries: not for the stack */
    char *p = malloc(pathlen ? pathlen : 1);
    pick best = {0};
    if (!t || !p || !pathlen) {
        free(t);
        free(p);
        return 0;
    }
    for (int di = 0; di < ndirs; di++) {
        DIR *d = opendir(dirs[di]);
        struct dirent *de;
        while (d && (de = readdir(d)) != NULL) {
            char why[300], err[256];
            const char *no = NULL;
            pick c = {.found = 1, .dir = di};
            if (!is_json_name(de->d_name))
                continue;
            if ((size_t)snprintf(p, pathlen, "%s/%s", dirs[di], de->d_name) >= pathlen ||
                strlen(de->d_name) >= sizeof c.name) {
                if (skip)
                    skip(ctx, de->d_name, "its path is too long");
                continue;
            }
            /* pj_tune_load refuses, without blocking, what is not a
             * readable regular file (a FIFO would hold the start) */
            if (pj_tune_load(p, t, NULL, NULL, NULL, NULL, err, sizeof err) < 0) {
                snprintf(why, sizeof why, "not a tuning table: %s", err);
                no = why;
            } else if (!t->device[0]) {
                no = "names no device";
            } else if (t->cc_major && (t->cc_major != cc_major || t->cc_minor != cc_minor)) {
                snprintf(why, sizeof why, "made on compute capability %d.%d, this GPU is %d.%d",
                         t->cc_major, t->cc_minor, cc_major, cc_minor);
                no = why;
            } else if (!t->cc_major && !same_words(device, t->device)) {
                /* "NVIDIA" alone makes any NVIDIA table as near as another
                 * Hopper's: an A100's would be weighed with them. */
                snprintf(why, sizeof why,
                         "made on \"%.60s\" and states no compute_capability (add "
                         "\"compute_capability\": \"%d.%d\" if that GPU has it)",
                         t->device, cc_major, cc_minor);
                no = why;
            }
            if (no) {
                if (skip)
                    skip(ctx, p, no);
                continue;
            }
            c.exact = same_words(device, t->device);
            c.near = pj_tablepick_nearness(device, t->device);
            const long long gap = (long long)t->sm_count - sm_count; /* any int the file has */
            c.gap = gap < 0 ? -gap : gap;
            snprintf(c.name, sizeof c.name, "%s", de->d_name);
            if (nearer(&c, &best)) {
                best = c;
                snprintf(path, pathlen, "%s", p);
                snprintf(table_device, devlen, "%s", t->device);
            }
        }
        if (d)
            closedir(d);
    }
    free(t);
    free(p);
    return best.found;
}
