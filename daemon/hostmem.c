/* hostmem.c — the host memory this process may still take (hostmem.h). */
#include "daemon/hostmem.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* v1 writes "no limit" as the largest page-aligned counter (2^63 less a
 * page); anything past 2^62 bytes is no limit on any host there is. */
#define NO_LIMIT (1ull << 62)

/* root/rel opened for reading (NULL where it cannot be). */
static FILE *open_under(const char *root, const char *rel)
{
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", root, rel) >= sizeof path)
        return NULL;
    return fopen(path, "r");
}

static int read_meminfo(const char *root, pj_hostmem *h)
{
    FILE *f = open_under(root, "proc/meminfo");
    if (!f)
        return -1;
    char line[256];
    unsigned long long kb;
    int have = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            h->mem_avail = (uint64_t)kb * 1024;
            have = 1;
        } else if (sscanf(line, "SwapFree: %llu kB", &kb) == 1) {
            h->swap_free = (uint64_t)kb * 1024;
        }
    }
    fclose(f);
    return have ? 0 : -1;
}

/* One number from dir/name: 0, with *v NO_LIMIT for v2's "max"; -1 when
 * the file cannot be read or holds something else. */
static int read_u64(const char *dir, const char *name, uint64_t *v)
{
    char buf[64];
    FILE *f = open_under(dir, name);
    if (!f)
        return -1;
    const char *got = fgets(buf, sizeof buf, f);
    fclose(f);
    if (!got)
        return -1;
    if (strncmp(buf, "max", 3) == 0 && (buf[3] == '\n' || buf[3] == '\0')) {
        *v = NO_LIMIT;
        return 0;
    }
    char *end;
    unsigned long long x = strtoull(buf, &end, 10);
    if (end == buf || (*end != '\n' && *end != '\0'))
        return -1;
    *v = x >= NO_LIMIT ? NO_LIMIT : (uint64_t)x;
    return 0;
}

/* The file cache of dir's cgroup that the kernel reclaims before it kills:
 * active_file + inactive_file of memory.stat (v1's total_ figures, which
 * count the levels below, where it has them). 0 where none is read. */
static uint64_t reclaimable(const char *dir)
{
    char line[256];
    FILE *f = open_under(dir, "memory.stat");
    if (!f)
        return 0;
    uint64_t own = 0, total = 0;
    int have_total = 0;
    unsigned long long v;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "active_file %llu", &v) == 1 ||
            sscanf(line, "inactive_file %llu", &v) == 1)
            own += v;
        else if (sscanf(line, "total_active_file %llu", &v) == 1 ||
                 sscanf(line, "total_inactive_file %llu", &v) == 1) {
            total += v;
            have_total = 1;
        }
    }
    fclose(f);
    return have_total ? total : own;
}

/* mountinfo escapes a space, tab, newline and backslash as \ooo. */
static void unescape(char *s)
{
    char *o = s;
    for (const char *p = s; *p; p++) {
        if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' &&
            p[3] >= '0' && p[3] <= '7') {
            *o++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
            p += 3;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
}

/* Does the comma-separated list hold word? */
static int has_word(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, word, n) == 0 && (p[n] == ',' || p[n] == '\0' || p[n] == '\n'))
            return 1;
    return 0;
}

typedef struct cg_mount {
    char root[PATH_MAX];  /* the hierarchy's path mounted there */
    char point[PATH_MAX]; /* where */
} cg_mount;

/* Is root a path prefix of own ("/" of everything, "/a" of "/a" and
 * "/a/b", not of "/ab")? */
static int path_within(const char *own, const char *root)
{
    size_t rl = strlen(root);
    if (strcmp(root, "/") == 0)
        return 1;
    return strncmp(own, root, rl) == 0 && (own[rl] == '/' || own[rl] == '\0');
}

/* One line of mountinfo, as find_mount needs it. */
typedef struct mnt_line {
    int id, parent;
    char *root, *point; /* unescaped; owned */
    int shows_own;      /* a mount of the hierarchy asked for, showing own */
} mnt_line;

/* Is mount a an ancestor of mount b in the mount tree (b mounted on a, or
 * on a mount on a, ...)? */
static int mount_below(const mnt_line *m, size_t n, size_t a, size_t b)
{
    int p = m[b].parent;
    for (size_t steps = 0; steps < n; steps++) {
        size_t k = 0;
        while (k < n && m[k].id != p)
            k++;
        if (k == n)
            return 0;
        if (k == a)
            return 1;
        if (m[k].parent == p)
            return 0;
        p = m[k].parent;
    }
    return 0;
}

/* Is mount i hidden by one listed after it (mounted later) at its mount
 * point or above it that it is not mounted on: one stacked on it, or a
 * container's later mount of another part of the hierarchy over its own
 * view? Only later ones: a parent is mounted, so listed, before what is
 * mounted on it. */
static int mount_hidden(const mnt_line *m, size_t n, size_t i)
{
    for (size_t j = i + 1; j < n; j++)
        if (path_within(m[i].point, m[j].point) && !mount_below(m, n, j, i))
            return 1;
    return 0;
}

/* The mount of cgroup2 (version 2) or of v1's memory controller (version
 * 1) that shows the process's cgroup own: 0, or -1 where there is none. A
 * mount of another part of the hierarchy (its root not a prefix of own)
 * does not show it, nor one that a later mount hides (mount_hidden);
 * where several show it, the last one listed wins. */
static int find_mount(const char *root, int version, const char *own, cg_mount *out)
{
    FILE *f = open_under(root, "proc/self/mountinfo");
    if (!f)
        return -1;
    char *line = NULL;
    size_t cap = 0, n = 0, have = 0;
    mnt_line *m = NULL;
    int found = -1;
    while (getline(&line, &cap, f) > 0) {
        /* id parent major:minor root point options [optional...] - type source super */
        char *sep = strstr(line, " - ");
        if (!sep)
            continue;
        *sep = '\0';
        /* the source is skipped: any text may be given to mount(2), and a
         * long one must not push the super options out of reach */
        char fstype[32], super[512] = "";
        if (sscanf(sep + 3, "%31s %*s %511s", fstype, super) < 1)
            continue;
        int id, parent;
        char *save, *tok = strtok_r(line, " ", &save);
        if (!tok || sscanf(tok, "%d", &id) != 1 || !(tok = strtok_r(NULL, " ", &save)) ||
            sscanf(tok, "%d", &parent) != 1 || !strtok_r(NULL, " ", &save))
            continue;
        char *mroot = strtok_r(NULL, " ", &save);
        char *point = mroot ? strtok_r(NULL, " ", &save) : NULL;
        if (!point || strlen(mroot) >= sizeof out->root || strlen(point) >= sizeof out->point)
            continue;
        if (n == have) {
            size_t grow = have ? 2 * have : 64;
            mnt_line *bigger = realloc(m, grow * sizeof *m);
            if (!bigger)
                break;
            m = bigger;
            have = grow;
        }
        mnt_line *l = &m[n];
        l->id = id;
        l->parent = parent;
        l->root = strdup(mroot);
        l->point = strdup(point);
        if (!l->root || !l->point) {
            free(l->root);
            free(l->point);
            break;
        }
        n++;
        unescape(l->root);
        unescape(l->point);
        l->shows_own =
            (version == 2 ? strcmp(fstype, "cgroup2") == 0
                          : strcmp(fstype, "cgroup") == 0 && has_word(super, "memory")) &&
            path_within(own, l->root);
    }
    for (size_t i = n; i-- > 0;) {
        if (m[i].shows_own && !mount_hidden(m, n, i)) {
            snprintf(out->root, sizeof out->root, "%s", m[i].root);
            snprintf(out->point, sizeof out->point, "%s", m[i].point);
            found = 0;
            break;
        }
    }
    for (size_t i = 0; i < n; i++) {
        free(m[i].root);
        free(m[i].point);
    }
    free(m);
    free(line);
    fclose(f);
    return found;
}

/* The process's path in cgroup2 (version 2) or in v1's memory hierarchy
 * (version 1), from /proc/self/cgroup: 0, or -1. */
static int own_cgroup(const char *root, int version, char *out, size_t len)
{
    FILE *f = open_under(root, "proc/self/cgroup");
    if (!f)
        return -1;
    char *line = NULL;
    size_t cap = 0;
    int found = -1;
    while (found != 0 && getline(&line, &cap, f) > 0) {
        /* hierarchy-id:controllers:path */
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        char *p = c2 + 1;
        p[strcspn(p, "\n")] = '\0';
        int v2 = strcmp(line, "0:") == 0 && c1[1] == '\0';
        if ((version == 2 && v2) || (version == 1 && !v2 && has_word(c1 + 1, "memory"))) {
            if (strlen(p) < len) {
                snprintf(out, len, "%s", p);
                found = 0;
            }
        }
    }
    free(line);
    fclose(f);
    return found;
}

/* One level of the hierarchy: its memory room, swap room (v2) or memory
 * and swap room together (v1's memsw), and room below memory.high
 * (NO_LIMIT where it sets none). */
typedef struct level_figures {
    uint64_t room, swap_room, high_room;
    uint64_t limit, high, used; /* used: usage less the reclaimable cache */
} level_figures;

static void level_room(const char *dir, int version, level_figures *lv)
{
    lv->room = lv->swap_room = lv->high_room = NO_LIMIT;
    lv->limit = lv->used = 0;
    lv->high = NO_LIMIT;
    uint64_t lim, usage, high = NO_LIMIT;
    if (read_u64(dir, version == 2 ? "memory.max" : "memory.limit_in_bytes", &lim) != 0 ||
        read_u64(dir, version == 2 ? "memory.current" : "memory.usage_in_bytes", &usage) != 0)
        return;
    if (version == 2 && read_u64(dir, "memory.high", &high) != 0)
        high = NO_LIMIT;
    uint64_t slim = NO_LIMIT, sused = 0;
    int swap_read = version == 2 ? read_u64(dir, "memory.swap.max", &slim) == 0 &&
                                       read_u64(dir, "memory.swap.current", &sused) == 0
                                 : read_u64(dir, "memory.memsw.limit_in_bytes", &slim) == 0 &&
                                       read_u64(dir, "memory.memsw.usage_in_bytes", &sused) == 0;
    if (!swap_read)
        slim = NO_LIMIT;
    /* memory.stat is the costly read (v1 sums it over the levels below):
     * only where a limit needs it */
    uint64_t cache = lim < NO_LIMIT || high < NO_LIMIT || (version == 1 && slim < NO_LIMIT)
                         ? reclaimable(dir)
                         : 0;
    uint64_t u = usage > cache ? usage - cache : 0;
    lv->limit = lim;
    lv->high = high;
    lv->used = u;
    if (lim < NO_LIMIT)
        lv->room = lim > u ? lim - u : 0;
    if (high < NO_LIMIT)
        lv->high_room = high > u ? high - u : 0;
    if (slim >= NO_LIMIT)
        return;
    if (version == 2) {
        lv->swap_room = slim > sused ? slim - sused : 0;
    } else {
        /* memsw counts memory and swap together: read_cgroup takes the
         * memory the process may take from it once that is known. */
        uint64_t su = sused > cache ? sused - cache : 0;
        lv->swap_room = slim > su ? slim - su : 0;
    }
}

/* Where the process's cgroup of the given version is read, into at: 0,
 * or -1 where the cgroup or its mount is not found. */
static int locate_cgroup(const char *root, int version, pj_hostmem_at *at)
{
    char own[PATH_MAX];
    cg_mount mnt;
    /* A path with ".." is a cgroup above this process's cgroup namespace:
     * no mount here shows it, nor the levels above it. */
    if (own_cgroup(root, version, own, sizeof own) != 0 || own[0] != '/' || strstr(own, "/..") ||
        find_mount(root, version, own, &mnt) != 0)
        return -1;
    /* own is the path in the hierarchy; the mount shows it from mnt.root
     * down. */
    const int whole = strcmp(mnt.root, "/") == 0;
    const char *rel = whole ? own : own + strlen(mnt.root);
    if (strcmp(rel, "/") == 0)
        rel = "";
    const size_t top = (size_t)snprintf(at->dir, sizeof at->dir, "%s%s", root, mnt.point);
    if (top >= sizeof at->dir || top + strlen(rel) >= sizeof at->dir)
        return -1;
    strcat(at->dir, rel);
    at->top = top;
    snprintf(at->mnt_root, sizeof at->mnt_root, "%s", whole ? "" : mnt.root);
    at->version = version;
    return 0;
}

/* The cgroup path of dir, a level at locates, as /proc/self/cgroup names
 * it ("/" for the top); a longer name is cut: it only labels a message. */
static void level_name(const pj_hostmem_at *at, const char *dir, char *out, size_t len)
{
    int n = snprintf(out, len, "%s%s", at->mnt_root, dir + at->top);
    if (n <= 0)
        snprintf(out, len, "/");
}

/* The cgroup at locates, from its level up to its mount's top, read into
 * h (its room below h's MemAvailable and SwapFree). */
static void read_cgroup(const pj_hostmem_at *at, pj_hostmem *h)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", at->dir);
    const int version = at->version;
    h->cg_version = version;
    level_name(at, dir, h->own_cgroup, sizeof h->own_cgroup);
    uint64_t best = NO_LIMIT, best_swap = NO_LIMIT, best_high = NO_LIMIT;
    char swap_level[sizeof h->swap_cgroup] = "";
    for (;;) {
        level_figures lv;
        level_room(dir, version, &lv);
        if (lv.room < best) {
            best = lv.room;
            h->cg_limit = lv.limit;
            h->cg_used = lv.used;
            level_name(at, dir, h->cgroup, sizeof h->cgroup);
            snprintf(h->cg_file, sizeof h->cg_file, "%s",
                     version == 2 ? "memory.max" : "memory.limit_in_bytes");
        }
        if (lv.high < NO_LIMIT && lv.high_room < best_high) {
            best_high = lv.high_room;
            h->high_set = 1;
            h->high_limit = lv.high;
            h->high_used = lv.used;
            h->high_room = lv.high_room;
            level_name(at, dir, h->high_cgroup, sizeof h->high_cgroup);
        }
        if (lv.swap_room < best_swap) {
            best_swap = lv.swap_room;
            level_name(at, dir, swap_level, sizeof swap_level);
        }
        if (strlen(dir) <= at->top)
            break;
        char *slash = strrchr(dir + at->top, '/');
        if (!slash)
            break;
        *slash = '\0';
    }
    if (best < h->avail) {
        h->avail = best;
        h->cg_binds = 1;
    }
    /* v1's memsw room holds the memory the process may take as well:
     * what is left past that is its swap (the memory room the smaller of
     * the limit's and MemAvailable). */
    if (version == 1 && best_swap < NO_LIMIT)
        best_swap = best_swap > h->avail ? best_swap - h->avail : 0;
    if (best_swap < h->swap) {
        h->swap = best_swap;
        h->swap_binds = 1;
        snprintf(h->swap_cgroup, sizeof h->swap_cgroup, "%s", swap_level);
        snprintf(h->swap_file, sizeof h->swap_file, "%s",
                 version == 2 ? "memory.swap.max" : "memory.memsw.limit_in_bytes");
    }
}

void pj_hostmem_locate(const char *root, pj_hostmem_at *at)
{
    memset(at, 0, sizeof *at);
    snprintf(at->root, sizeof at->root, "%s", root ? root : "");
    /* A hybrid host mounts both; its memory controller is v1's. */
    /* version is set only by a locate that succeeds: with neither, the
     * figures are /proc/meminfo's alone */
    if (locate_cgroup(at->root, 1, at) != 0)
        locate_cgroup(at->root, 2, at);
}

int pj_hostmem_read_at(const pj_hostmem_at *at, pj_hostmem *out)
{
    memset(out, 0, sizeof *out);
    if (read_meminfo(at->root, out) != 0)
        return -1;
    out->avail = out->mem_avail;
    out->swap = out->swap_free;
    if (at->version)
        read_cgroup(at, out);
    return 0;
}

int pj_hostmem_read(const char *root, pj_hostmem *out)
{
    pj_hostmem_at at;
    pj_hostmem_locate(root, &at);
    return pj_hostmem_read_at(&at, out);
}

pj_size_text pj_hostmem_size(uint64_t bytes)
{
    pj_size_text t;
    if (bytes >= (1ull << 30))
        snprintf(t.s, sizeof t.s, "%.1f GiB", (double)bytes / (double)(1ull << 30));
    else
        snprintf(t.s, sizeof t.s, "%.0f MiB", (double)bytes / (double)(1ull << 20));
    return t;
}

void pj_hostmem_describe(const pj_hostmem *h, char *buf, size_t len)
{
    char swap[400];
    if (h->swap_binds)
        snprintf(swap, sizeof swap, "%s of swap (the cgroup %s's %s; SwapFree %s)",
                 pj_hostmem_size(h->swap).s, h->swap_cgroup, h->swap_file,
                 pj_hostmem_size(h->swap_free).s);
    if (h->cg_binds)
        snprintf(buf, len, "the cgroup %s allows %s (%s), %s of it in use; %s%s%s", h->cgroup,
                 pj_hostmem_size(h->cg_limit).s, h->cg_file, pj_hostmem_size(h->cg_used).s,
                 h->swap_binds ? "" : "swap ", h->swap_binds ? swap : pj_hostmem_size(h->swap).s,
                 h->swap_binds ? "" : " free to it");
    else if (h->swap_binds)
        snprintf(buf, len, "MemAvailable %s + %s", pj_hostmem_size(h->mem_avail).s, swap);
    else
        snprintf(buf, len, "MemAvailable %s + SwapFree %s", pj_hostmem_size(h->mem_avail).s,
                 pj_hostmem_size(h->swap_free).s);
}
