/* tablepick.c — see tablepick.h. */
#include "daemon/tablepick.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dispatch.h"

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

static int is_json_name(const char *name)
{
    size_t l = strlen(name);
    return l > 5 && name[0] != '.' && !strcmp(name + l - 5, ".json");
}

int pj_tablepick_nearest(const char *dir, const char *device, int sm_count, char *path,
                         size_t pathlen, char *table_device, size_t devlen)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    pj_tune_table *t = malloc(sizeof *t); /* PJ_TUNE_MAX entries: not for the stack */
    if (!t) {
        closedir(d);
        return 0;
    }
    int found = 0, best_near = -1, best_gap = 0;
    char best_name[256] = "";
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char p[4096], err[256];
        if (!is_json_name(de->d_name) || strlen(de->d_name) >= sizeof best_name)
            continue;
        if (snprintf(p, sizeof p, "%s/%s", dir, de->d_name) >= (int)sizeof p)
            continue;
        memset(t, 0, sizeof *t);
        if (pj_tune_load(p, t, NULL, NULL, NULL, NULL, err, sizeof err) < 0 || !t->device[0])
            continue;
        const int near = pj_tablepick_nearness(device, t->device);
        const int gap = abs(t->sm_count - sm_count);
        /* readdir's order is the file system's: the name breaks ties */
        if (near > best_near || (near == best_near && gap < best_gap) ||
            (near == best_near && gap == best_gap && strcmp(de->d_name, best_name) < 0)) {
            best_near = near;
            best_gap = gap;
            snprintf(best_name, sizeof best_name, "%s", de->d_name);
            snprintf(path, pathlen, "%s", p);
            snprintf(table_device, devlen, "%s", t->device);
            found = 1;
        }
    }
    closedir(d);
    free(t);
    return found;
}
