/* lockpid.h — the pid a lock file's holder writes into it, so that the
 * others can name who holds it (daemon/socklock.h: the socket; daemon/
 * loadturn.h: the load turn). The pid is a hint for messages: the flock
 * is what holds, and a holder between its flock and its write names none. */
#ifndef PJ_LOCKPID_H
#define PJ_LOCKPID_H

/* The pid written in fd's file, or 0 where none is (empty, unreadable, or
 * not a number). */
long pj_lockpid_read(int fd);

/* This process's pid written as the file's whole text ("<pid>\n"): 0, or
 * -1 when the file cannot be truncated or written. */
int pj_lockpid_write(int fd);

#endif
