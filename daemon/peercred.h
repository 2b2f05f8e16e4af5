/* peercred.h — what SO_PEERCRED does not say about a connecting process.
 *
 * The IPC socket's peer credentials carry one uid, one gid (the primary)
 * and the pid at connect time. The socket file's mode lets in every member
 * of its group, supplementary groups included (`usermod -aG projd user`),
 * so the daemon's own check reads the peer's supplementary groups too.
 */
#ifndef PJ_PEERCRED_H
#define PJ_PEERCRED_H

#include <stdint.h>

/* Up to max supplementary group ids of process pid, read from
 * /proc/<pid>/status ("Groups:"), in out. The count, or -1: no such
 * process, unreadable, or its effective uid is not euid (the peer has
 * exited and its pid was reused: its groups must not be taken for another
 * process's). A process in more than max groups is reported with its first
 * max. */
int pj_peer_groups(uint64_t pid, uint32_t euid, uint32_t *out, int max);

/* pj_peer_groups on a /proc status file's text (for tests). */
int pj_peer_groups_parse(const char *status, uint32_t euid, uint32_t *out, int max);

/* Whether a connection's process has exited, for work the device holds on
 * its behalf (a wait for an event only it would record). pj_peer_watch
 * opens a handle on process pid when the connection is accepted, while the
 * process is there to be named: a pidfd where the kernel has them, which
 * stays that process's even once its pid is reused; else -1, and the
 * check reads /proc/<pid>/stat, comparing the process's start time with
 * the one read at open so that a reused pid does not pass for the
 * client. */
typedef struct pj_peer_watch {
    int32_t pid;
    int pidfd;                    /* -1: none (no pidfd_open, or the process was gone) */
    int exited;                   /* known exited at open */
    unsigned long long starttime; /* /proc's field 22 at open, 0: unknown */
} pj_peer_watch;

void pj_peer_watch_open(pj_peer_watch *w, int32_t pid);
/* 1: the process has exited (a zombie, reaped, or its pid now another
 * process's); 0: it still runs, or it cannot be told now (the check is
 * tried again later); -1: pid <= 0, nothing known. */
int pj_peer_exited(const pj_peer_watch *w);
void pj_peer_watch_close(pj_peer_watch *w);

/* The state letter of a /proc/<pid>/stat line ("123 (name) S ..."; the
 * name may hold spaces and parentheses), or 0; *starttime (may be NULL)
 * gets field 22, the start time in clock ticks since boot, or 0 (for
 * tests). */
char pj_peer_stat_state(const char *stat, unsigned long long *starttime);

#endif
