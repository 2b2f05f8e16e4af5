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

#endif
