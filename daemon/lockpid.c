/* lockpid.c — see lockpid.h. */
#include "daemon/lockpid.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

long pj_lockpid_read(int fd)
{
    char buf[24];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *end;
    long pid = strtol(buf, &end, 10);
    return end != buf && pid > 0 ? pid : 0;
}

int pj_lockpid_write(int fd)
{
    char pid[24];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    return ftruncate(fd, 0) == 0 && pwrite(fd, pid, (size_t)n, 0) == n ? 0 : -1;
}
