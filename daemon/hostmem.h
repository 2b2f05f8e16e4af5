/* hostmem.h — how much host memory this process may still take: the
 * kernel's MemAvailable and SwapFree, and below them the limit of the
 * memory cgroup the process runs in.
 *
 * A unit's MemoryMax= (cgroup v2 memory.max) or a container's --memory
 * (v2 memory.max, or v1 memory.limit_in_bytes) caps the process well below
 * what /proc/meminfo says is free: inside a container /proc/meminfo is the
 * host's. Past the cap the kernel's OOM killer ends the process with no
 * word of why, so the model loader (daemon/model.c) compares what it will
 * hold with the figures here, the cgroup's included.
 *
 * The cgroup's room is, for its own level and every level above it up to
 * the root of its hierarchy's mount, the limit less the usage, the usage
 * less the file cache the kernel would reclaim before it kills
 * (active_file + inactive_file of memory.stat); the smallest room wins.
 * The hierarchy is found as the kernel names it (/proc/self/cgroup, the
 * mounts in /proc/self/mountinfo): cgroup v2 alone, v1's memory controller
 * (a hybrid host's or an old container's) where one is mounted. Swap: v2's
 * memory.swap.max less memory.swap.current; v1's memory.memsw.limit_in_bytes
 * less memory.memsw.usage_in_bytes, less the memory the process may take
 * (memsw counts both). Where no cgroup file can be read the figures are
 * /proc/meminfo's alone.
 * v2's memory.high does not kill: past it the kernel reclaims and throttles
 * the process (a load of anonymous memory without swap crawls), so its room
 * is kept apart (high_*) for a warning, not counted in avail. Not counted: a
 * v1 hierarchy with use_hierarchy 0 (a parent's limit then does not cover the
 * levels below it, and is counted as if it did). A mount of another part
 * of the hierarchy than the process's is not read, nor one a later mount
 * hides (then no cgroup is read: its files are not in view); where several
 * mounts show the process's cgroup, the last one listed. */
#ifndef PJ_HOSTMEM_H
#define PJ_HOSTMEM_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pj_hostmem {
    uint64_t avail;     /* memory the process may take without swap: the smaller of the two */
    uint64_t swap;      /* swap it may take on top */
    uint64_t mem_avail; /* /proc/meminfo's MemAvailable */
    uint64_t swap_free; /* /proc/meminfo's SwapFree */
    /* The cgroup level whose room is the smallest, when it is smaller than
     * MemAvailable (cg_binds 0: none is; a limit of 0 is a limit). */
    int cg_binds;
    char cgroup[256];     /* its path, as /proc/self/cgroup names it ("/system.slice/...") */
    char cg_file[32];     /* the file of its limit ("memory.max", "memory.limit_in_bytes") */
    uint64_t cg_limit;    /* that limit */
    uint64_t cg_used;     /* its usage less its reclaimable file cache */
    int cg_version;       /* 1 or 2; 0 where no cgroup was read */
    char own_cgroup[256]; /* the process's cgroup, where cg_version is not 0 */
    /* The level whose swap limit leaves less swap than SwapFree (swap_binds
     * 0: none does): a unit's MemorySwapMax=, v1's memsw. */
    int swap_binds;
    char swap_cgroup[256];
    char swap_file[32]; /* "memory.swap.max", "memory.memsw.limit_in_bytes" */
    /* The v2 level whose memory.high leaves the least room (high_set 0:
     * none sets one). */
    int high_set;
    char high_cgroup[256];
    uint64_t high_limit; /* its memory.high */
    uint64_t high_used;  /* its usage less its reclaimable file cache */
    uint64_t high_room;  /* high_limit less high_used (0 when past it) */
} pj_hostmem;

/* Reads the figures. root prefixes every path read ("/proc/...", the
 * cgroup mounts; NULL or "": the system's own), so that tests can build a
 * host of their own. 0, or -1 when /proc/meminfo cannot be read or lacks
 * MemAvailable (a kernel before 3.14): then there is no figure to check.
 * pj_hostmem_locate then pj_hostmem_read_at. */
int pj_hostmem_read(const char *root, pj_hostmem *out);

/* Where the figures are read: the process's memory cgroup, found once
 * (/proc/self/cgroup, /proc/self/mountinfo), so that a reader taking them
 * again and again (the loader, before each layer) reads only the counters.
 * A process moved to another cgroup afterwards is read where it was. */
typedef struct pj_hostmem_at {
    char root[PATH_MAX];     /* the prefix of every path read */
    char dir[PATH_MAX];      /* the cgroup's folder, under root */
    size_t top;              /* dir's length up to its mount point */
    char mnt_root[PATH_MAX]; /* the hierarchy's path mounted there ("" for "/") */
    int version;             /* 1 or 2; 0: no cgroup found, /proc/meminfo alone */
} pj_hostmem_at;
void pj_hostmem_locate(const char *root, pj_hostmem_at *at);

/* pj_hostmem_read's figures where at says. */
int pj_hostmem_read_at(const pj_hostmem_at *at, pj_hostmem *out);

/* bytes as text for a message: "%.1f GiB" from 1 GiB up, else "%.0f MiB"
 * (a test host's 150 MiB is not "0.1 GiB"). The text lives as long as the
 * full expression that called it, so several may be passed to one printf. */
typedef struct pj_size_text {
    char s[24];
} pj_size_text;
pj_size_text pj_hostmem_size(uint64_t bytes);

/* A sentence on where the room ends, for an error that says it is short:
 * "the cgroup /system.slice/projd@0.service allows 16.0 GiB (memory.max),
 * 1.2 GiB of it in use; swap 0 MiB free to it", or "MemAvailable 12.0 GiB +
 * SwapFree 0 MiB" where no cgroup limit is below MemAvailable; a swap limit
 * below SwapFree is named where it binds ("... + 0 MiB of swap (the
 * cgroup /system.slice/projd@0.service's memory.swap.max; SwapFree 8.0
 * GiB)"). */
void pj_hostmem_describe(const pj_hostmem *h, char *buf, size_t len);

#endif
