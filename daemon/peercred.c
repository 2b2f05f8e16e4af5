/* peercred.c — a connecting process's supplementary groups and whether it has exited (see
 * peercred.h). */
#include "daemon/peercred.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The text after "Name:" at the start of a line of s, or NULL. */
static const char *field(const char *s, const char *name)
{
    size_t nl = strlen(name);
    for (const char *p = s; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, name, nl) == 0)
            return p + nl;
    return NULL;
}

int pj_peer_groups_parse(const char *status, uint32_t euid, uint32_t *out, int max)
{
    /* Uid: real, effective, saved, filesystem. */
    const char *u = field(status, "Uid:");
    const char *g = field(status, "Groups:");
    if (!u || !g)
        return -1;
    char *end;
    errno = 0;
    (void)strtoul(u, &end, 10);
    unsigned long eu = strtoul(end, &end, 10);
    if (errno || eu != euid)
        return -1;
    int n = 0;
    for (const char *p = g; n < max;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p < '0' || *p > '9') /* the line's end */
            break;
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (errno || v > UINT32_MAX)
            break;
        out[n++] = (uint32_t)v;
        p = end;
    }
    return n;
}

int pj_peer_groups(uint64_t pid, uint32_t euid, uint32_t *out, int max)
{
    if (pid == 0)
        return -1;
    char path[48];
    snprintf(path, sizeof path, "/proc/%" PRIu64 "/status", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    /* The whole file (~1.5 KB): the Groups line of a process in many
     * groups can be long. */
    char *text = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (cap - len < 1024) {
            size_t nc = cap ? cap * 2 : 4096;
            char *nt = nc <= (1u << 20) ? realloc(text, nc) : NULL;
            if (!nt) {
                free(text);
                fclose(f);
                return -1;
            }
            text = nt;
            cap = nc;
        }
        size_t got = fread(text + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0)
            break;
    }
    fclose(f);
    text[len] = '\0';
    int n = pj_peer_groups_parse(text, euid, out, max);
    free(text);
    return n;
}

char pj_peer_stat_state(const char *stat, unsigned long long *starttime)
{
    if (starttime)
        *starttime = 0;
    /* The name is in parentheses and may hold both: the state follows the
     * last ')'. */
    const char *p = stat ? strrchr(stat, ')') : NULL;
    if (!p || p[1] != ' ' || !p[2])
        return 0;
    char st = p[2];
    if (starttime) {
        /* Fields 3 (the state) to 22 (starttime) follow, space-separated. */
        const char *q = p + 2;
        for (int field = 3; field < 22 && q; field++) {
            q = strchr(q, ' ');
            if (q)
                q++;
        }
        if (q)
            *starttime = strtoull(q, NULL, 10);
    }
    return st;
}

/* The state letter and start time of process pid from /proc; 0 with
 * *gone set when there is no such process, 0 alone when unreadable. */
static char proc_state(int32_t pid, unsigned long long *starttime, int *gone)
{
    char path[64], buf[1024];
    *gone = 0;
    *starttime = 0;
    snprintf(path, sizeof path, "/proc/%" PRId32 "/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) {
        *gone = errno == ENOENT || errno == ESRCH;
        return 0;
    }
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return pj_peer_stat_state(buf, starttime);
}

void pj_peer_watch_open(pj_peer_watch *w, int32_t pid)
{
    w->pid = pid;
    w->pidfd = -1;
    w->exited = 0;
    w->starttime = 0;
    if (pid <= 0)
        return;
#ifdef SYS_pidfd_open
    long fd = syscall(SYS_pidfd_open, (long)pid, 0L);
    if (fd >= 0) {
        w->pidfd = (int)fd;
        return;
    }
    if (errno == ESRCH) {
        w->exited = 1;
        return;
    }
#endif
    int gone;
    (void)proc_state(pid, &w->starttime, &gone);
    w->exited = gone;
}

int pj_peer_exited(const pj_peer_watch *w)
{
    if (w->pid <= 0)
        return -1;
    if (w->exited)
        return 1;
    if (w->pidfd >= 0) {
        /* A pidfd polls readable once its process has exited. */
        struct pollfd p = {.fd = w->pidfd, .events = POLLIN};
        return poll(&p, 1, 0) > 0 ? 1 : 0;
    }
    unsigned long long start;
    int gone;
    char st = proc_state(w->pid, &start, &gone);
    if (gone)
        return 1;
    if (!st)
        return 0; /* unreadable now (out of descriptors?): asked again later */
    if (w->starttime && start && start != w->starttime)
        return 1; /* the pid is another process's now */
    return st == 'Z' || st == 'X' || st == 'x' ? 1 : 0;
}

void pj_peer_watch_close(pj_peer_watch *w)
{
    if (w->pidfd >= 0)
        close(w->pidfd);
    w->pidfd = -1;
}
