/* test_hostmem.c — the host memory the process may take (daemon/hostmem.h):
 * /proc/meminfo's figures, and below them a memory cgroup's limit, read
 * from hosts built under a directory of the test's: cgroup v2 as systemd
 * runs a unit, v1 as an older container runtime does, limits at the leaf
 * and above it, swap limits, and this machine's own. */
#include <check.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/hostmem.h"
#include "tests/helpers/fixture.h"

#define GIB (1ull << 30)
#define MIB (1ull << 20)

/* A fresh host tree per test (its own folder under the fixture's). */
static void host_dir(char *root, size_t cap, const char *name)
{
    pj_fixture_path(root, cap, name);
    ck_assert_int_eq(mkdir(root, 0755), 0);
}

static void put(const char *root, const char *rel, const char *text)
{
    ck_assert_msg(pj_fixture_write_under(root, rel, text) == 0, "cannot write %s/%s", root, rel);
}

static void put_u64(const char *root, const char *rel, unsigned long long v)
{
    char text[32];
    snprintf(text, sizeof text, "%llu\n", v);
    put(root, rel, text);
}

static void put_meminfo(const char *root, unsigned long long avail, unsigned long long swap)
{
    char text[256];
    snprintf(text, sizeof text,
             "MemTotal:       999999999 kB\nMemFree:  100 kB\nMemAvailable:   %llu kB\n"
             "SwapTotal: 99999999 kB\nSwapFree:        %llu kB\n",
             avail / 1024, swap / 1024);
    put(root, "proc/meminfo", text);
}

/* A cgroup v2 host as systemd runs projd@0: the unified hierarchy at
 * /sys/fs/cgroup, the process in system.slice/projd@0.service. */
static void v2_unit(const char *root)
{
    put(root, "proc/self/cgroup", "0::/system.slice/projd@0.service\n");
    put(root, "proc/self/mountinfo",
        "22 1 0:21 / / rw,relatime - ext4 /dev/sda1 rw\n"
        "27 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
        "rw,nsdelegate,memory_recursiveprot\n");
    put(root, "sys/fs/cgroup/memory.stat", "anon 1\n"); /* the root sets no limit */
    put(root, "sys/fs/cgroup/system.slice/memory.max", "max\n");
    put_u64(root, "sys/fs/cgroup/system.slice/memory.current", 40 * GIB);
    put(root, "sys/fs/cgroup/system.slice/memory.swap.max", "max\n");
    put_u64(root, "sys/fs/cgroup/system.slice/memory.swap.current", 0);
}

#define UNIT "sys/fs/cgroup/system.slice/projd@0.service/"

START_TEST(meminfo_alone)
{
    char root[4200];
    pj_hostmem h;
    host_dir(root, sizeof root, "bare");
    put_meminfo(root, 24 * GIB, 2 * GIB);
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_uint_eq(h.mem_avail, 24 * GIB);
    ck_assert_uint_eq(h.swap_free, 2 * GIB);
    ck_assert_uint_eq(h.avail, 24 * GIB);
    ck_assert_uint_eq(h.swap, 2 * GIB);
    ck_assert_uint_eq(h.cg_limit, 0);
    ck_assert_int_eq(h.cg_version, 0);
    char d[256];
    pj_hostmem_describe(&h, d, sizeof d);
    ck_assert_str_eq(d, "MemAvailable 24.0 GiB + SwapFree 2.0 GiB");
    /* No MemAvailable (a kernel before 3.14): no figure, so no check. */
    put(root, "proc/meminfo", "MemTotal: 32000000 kB\nSwapFree: 5 kB\n");
    ck_assert_int_eq(pj_hostmem_read(root, &h), -1);
    host_dir(root, sizeof root, "empty");
    ck_assert_int_eq(pj_hostmem_read(root, &h), -1);
}
END_TEST

/* MemoryMax= of the unit: its memory.max less what it uses beyond its file
 * cache; memory.swap.max 0 (MemorySwapMax=0) leaves no swap, whatever
 * SwapFree says. */
START_TEST(v2_unit_limit)
{
    char root[4200], d[384];
    pj_hostmem h;
    host_dir(root, sizeof root, "v2");
    put_meminfo(root, 100 * GIB, 8 * GIB);
    v2_unit(root);
    put_u64(root, UNIT "memory.max", 16 * GIB);
    put_u64(root, UNIT "memory.current", 3 * GIB);
    put(root, UNIT "memory.stat",
        "anon 1073741824\nfile 2147483648\nactive_file 1073741824\ninactive_file 1073741824\n"
        "shmem 0\n");
    put(root, UNIT "memory.swap.max", "0\n");
    put_u64(root, UNIT "memory.swap.current", 0);
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_int_eq(h.cg_version, 2);
    ck_assert_uint_eq(h.avail, 15 * GIB);
    ck_assert_uint_eq(h.swap, 0);
    ck_assert_uint_eq(h.cg_limit, 16 * GIB);
    ck_assert_uint_eq(h.cg_used, 1 * GIB);
    ck_assert_str_eq(h.cgroup, "/system.slice/projd@0.service");
    ck_assert_str_eq(h.cg_file, "memory.max");
    ck_assert_uint_eq(h.mem_avail, 100 * GIB); /* kept, for the message */
    ck_assert_int_eq(h.cg_binds, 1);
    ck_assert_int_eq(h.swap_binds, 1);
    pj_hostmem_describe(&h, d, sizeof d);
    ck_assert_str_eq(d, "the cgroup /system.slice/projd@0.service allows 16.0 GiB (memory.max), "
                        "1.0 GiB of it in use; 0 MiB of swap (the cgroup "
                        "/system.slice/projd@0.service's memory.swap.max; SwapFree 8.0 GiB)");
    /* Swap not capped: as free to the cgroup as to the host. */
    put(root, UNIT "memory.swap.max", "max\n");
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_int_eq(h.swap_binds, 0);
    pj_hostmem_describe(&h, d, sizeof d);
    ck_assert_str_eq(d, "the cgroup /system.slice/projd@0.service allows 16.0 GiB (memory.max), "
                        "1.0 GiB of it in use; swap 8.0 GiB free to it");
    put(root, UNIT "memory.swap.max", "0\n");

    /* Below a GiB in MiB: a small host's figures are not "0.1 GiB". */
    ck_assert_str_eq(pj_hostmem_size(150 * MIB).s, "150 MiB");
    ck_assert_str_eq(pj_hostmem_size(GIB - 1).s, "1024 MiB");
    ck_assert_str_eq(pj_hostmem_size(GIB + GIB / 2).s, "1.5 GiB");

    /* Usage past the limit (the cache not yet given back): no room, not
     * a wrapped figure. */
    put_u64(root, UNIT "memory.current", 20 * GIB);
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_uint_eq(h.avail, 0);

    /* The slice above binds harder: 10 GiB, 9 of them used. */
    put_u64(root, UNIT "memory.current", 3 * GIB);
    put_u64(root, "sys/fs/cgroup/system.slice/memory.max", 10 * GIB);
    put_u64(root, "sys/fs/cgroup/system.slice/memory.current", 9 * GIB);
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_uint_eq(h.avail, 1 * GIB);
    ck_assert_str_eq(h.cgroup, "/system.slice");
    ck_assert_uint_eq(h.cg_limit, 10 * GIB);

    /* Limits above MemAvailable: MemAvailable is the figure, no cgroup
     * named. */
    put(root, "sys/fs/cgroup/system.slice/memory.max", "max\n");
    put_u64(root, UNIT "memory.max", 500 * GIB);
    put(root, UNIT "memory.swap.max", "max\n");
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_uint_eq(h.avail, 100 * GIB);
    ck_assert_uint_eq(h.swap, 8 * GIB);
    ck_assert_int_eq(h.cg_binds, 0);
    ck_assert_int_eq(h.cg_version, 2);
    pj_hostmem_describe(&h, d, sizeof d);
    ck_assert_str_eq(d, "MemAvailable 100.0 GiB + SwapFree 8.0 GiB");

    /* A swap limit below SwapFree: 3 GiB allowed, 1 used; memory not
     * capped, so MemAvailable and the swap cap are named. */
    put_u64(root, UNIT "memory.swap.max", 3 * GIB);
    put_u64(root, UNIT "memory.swap.current", 1 * GIB);
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_uint_eq(h.swap, 2 * GIB);
    pj_hostmem_describe(&h, d, sizeof d);
    ck_assert_str_eq(d, "MemAvailable 100.0 GiB + 2.0 GiB of swap (the cgroup "
                        "/system.slice/projd@0.service's memory.swap.max; SwapFree 8.0 GiB)");

    /* A limit of 0 is a limit (no room), not "none". */
    put_u64(root, UNIT "memory.max", 0);
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_uint_eq(h.avail, 0);
    ck_assert_int_eq(h.cg_binds, 1);
    ck_assert_uint_eq(h.cg_limit, 0);
    pj_hostmem_describe(&h, d, sizeof d);
    ck_assert_msg(strstr(d, "the cgroup /system.slice/projd@0.service allows 0 MiB (memory.max)"),
                  "%s", d);
}
END_TEST

/* MemoryHigh= (v2 memory.high) throttles, it does not kill: its room is
 * kept apart from avail, at the level where it is smallest, net of the
 * file cache as memory.max's is; "max" or a v1 host sets none. */
START_TEST(v2_memory_high_apart)
{
    char root[4200];
    pj_hostmem h;
    host_dir(root, sizeof root, "v2high");
    put_meminfo(root, 100 * GIB, 0);
    v2_unit(root);
    put_u64(root, UNIT "memory.max", 40 * GIB);
    put_u64(root, UNIT "memory.high", 12 * GIB);
    put_u64(root, UNIT "memory.current", 5 * GIB);
    put(root, UNIT "memory.stat", "anon 1\nactive_file 1073741824\ninactive_file 1073741824\n");
    put(root, "sys/fs/cgroup/system.slice/memory.high", "max\n");
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_uint_eq(h.avail, 37 * GIB); /* memory.max's room, not memory.high's */
    ck_assert_uint_eq(h.high_limit, 12 * GIB);
    ck_assert_uint_eq(h.high_used, 3 * GIB);
    ck_assert_uint_eq(h.high_room, 9 * GIB);
    ck_assert_str_eq(h.high_cgroup, "/system.slice/projd@0.service");

    /* The slice's MemoryHigh= leaves less: it is the one named. */
    put_u64(root, "sys/fs/cgroup/system.slice/memory.high", 45 * GIB);
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_uint_eq(h.high_room, 5 * GIB); /* 45 less the slice's 40 */
    ck_assert_uint_eq(h.high_limit, 45 * GIB);
    ck_assert_str_eq(h.high_cgroup, "/system.slice");

    /* Usage past it: no room, not a wrapped figure. */
    put_u64(root, "sys/fs/cgroup/system.slice/memory.high", 30 * GIB);
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_uint_eq(h.high_room, 0);

    /* 0 is a limit: set, no room. */
    put_u64(root, "sys/fs/cgroup/system.slice/memory.high", 0);
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_int_eq(h.high_set, 1);
    ck_assert_uint_eq(h.high_limit, 0);
    ck_assert_uint_eq(h.high_room, 0);

    /* None set anywhere. */
    put(root, UNIT "memory.high", "max\n");
    put(root, "sys/fs/cgroup/system.slice/memory.high", "max\n");
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_int_eq(h.high_set, 0);
    ck_assert_uint_eq(h.avail, 37 * GIB);
}
END_TEST

/* Inside a container with its own cgroup namespace the process sits at
 * "0::/" and the mount's top is its cgroup: a limit there is read. */
START_TEST(v2_namespaced_container)
{
    char root[4200];
    pj_hostmem h;
    host_dir(root, sizeof root, "v2ns");
    put_meminfo(root, 500 * GIB, 0);
    put(root, "proc/self/cgroup", "0::/\n");
    put(root, "proc/self/mountinfo",
        "700 650 0:30 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw\n");
    put_u64(root, "sys/fs/cgroup/memory.max", 32 * GIB);
    put_u64(root, "sys/fs/cgroup/memory.current", 2 * GIB);
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_uint_eq(h.avail, 30 * GIB);
    ck_assert_str_eq(h.cgroup, "/");
}
END_TEST

/* cgroup v1 as a container runtime without cgroup namespaces mounts it:
 * the memory controller's hierarchy from /docker/<id> down, at
 * /sys/fs/cgroup/memory, beside other controllers and a hybrid host's
 * unified mount (which has no memory controller there). */
START_TEST(v1_container_limit)
{
    char root[4200];
    pj_hostmem h;
    host_dir(root, sizeof root, "v1");
    put_meminfo(root, 200 * GIB, 4 * GIB);
    put(root, "proc/self/cgroup",
        "12:pids:/docker/abc\n6:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n"
        "1:name=systemd:/docker/abc\n0::/docker/abc\n");
    put(root, "proc/self/mountinfo",
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        "32 31 0:29 /docker/abc /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup "
        "rw,cpu,cpuacct\n"
        "35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        "41 31 0:38 /docker/abc /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n");
    put_u64(root, "sys/fs/cgroup/memory/memory.limit_in_bytes", 8 * GIB);
    put_u64(root, "sys/fs/cgroup/memory/memory.usage_in_bytes", 2 * GIB);
    put(root, "sys/fs/cgroup/memory/memory.stat",
        "active_file 1\ninactive_file 1\ntotal_active_file 536870912\n"
        "total_inactive_file 536870912\n");
    /* memsw: memory and swap together, 10 GiB, 2.5 used: 8.5 GiB of room
     * of which 7 are the memory's, so 1.5 GiB of swap. */
    put_u64(root, "sys/fs/cgroup/memory/memory.memsw.limit_in_bytes", 10 * GIB);
    put_u64(root, "sys/fs/cgroup/memory/memory.memsw.usage_in_bytes", 2 * GIB + GIB / 2);
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_int_eq(h.cg_version, 1);
    ck_assert_uint_eq(h.avail, 7 * GIB);
    ck_assert_uint_eq(h.cg_used, 1 * GIB);
    ck_assert_uint_eq(h.swap, GIB + GIB / 2);
    ck_assert_str_eq(h.cgroup, "/docker/abc");
    ck_assert_str_eq(h.cg_file, "memory.limit_in_bytes");
    /* v1's "no limit" (2^63 less a page) is none. */
    put_u64(root, "sys/fs/cgroup/memory/memory.limit_in_bytes", 9223372036854771712ull);
    put_u64(root, "sys/fs/cgroup/memory/memory.memsw.limit_in_bytes", 9223372036854771712ull);
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_uint_eq(h.avail, 200 * GIB);
    ck_assert_uint_eq(h.swap, 4 * GIB);
    ck_assert_int_eq(h.cg_binds, 0);
    ck_assert_int_eq(h.swap_binds, 0);

    /* MemAvailable binds harder than the limit: memsw's room less the
     * memory the process may take (20 GiB), not less the limit's room.
     * Limit 100 GiB, memsw 140 GiB, 2 GiB used of each (1 of them cache):
     * memsw room 139, less 20: swap 119 GiB, above SwapFree's 50. */
    put_meminfo(root, 20 * GIB, 50 * GIB);
    put_u64(root, "sys/fs/cgroup/memory/memory.limit_in_bytes", 100 * GIB);
    put_u64(root, "sys/fs/cgroup/memory/memory.memsw.limit_in_bytes", 140 * GIB);
    put_u64(root, "sys/fs/cgroup/memory/memory.memsw.usage_in_bytes", 2 * GIB);
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_uint_eq(h.avail, 20 * GIB);
    ck_assert_uint_eq(h.swap, 50 * GIB);
    /* memsw 60 GiB: 59 of room less 20: 39 GiB of swap, named. */
    put_u64(root, "sys/fs/cgroup/memory/memory.memsw.limit_in_bytes", 60 * GIB);
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_uint_eq(h.swap, 39 * GIB);
    ck_assert_int_eq(h.swap_binds, 1);
    ck_assert_str_eq(h.swap_file, "memory.memsw.limit_in_bytes");
    ck_assert_str_eq(h.swap_cgroup, "/docker/abc");

    /* A mount source longer than any buffer (mount(2) takes any text):
     * the memory controller is still found in the options after it. */
    put(root, "proc/self/mountinfo",
        "35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw,relatime - cgroup "
        "a-source-name-longer-than-sixty-four-characters-given-to-mount-by-hand rw,memory\n");
    put_u64(root, "sys/fs/cgroup/memory/memory.limit_in_bytes", 8 * GIB);
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_int_eq(h.cg_version, 1);
    ck_assert_uint_eq(h.avail, 7 * GIB);
}
END_TEST

/* A mount point with a space (mountinfo writes \040) and a v1 hierarchy
 * walked from a nested cgroup up to its mount's top, the top binding. */
START_TEST(v1_nested_escaped_mount)
{
    char root[4200];
    pj_hostmem h;
    host_dir(root, sizeof root, "v1esc");
    put_meminfo(root, 64 * GIB, 0);
    put(root, "proc/self/cgroup", "4:memory:/jobs/projd\n");
    put(root, "proc/self/mountinfo",
        "35 31 0:32 / /cg\\040mem rw,relatime - cgroup cgroup rw,memory\n");
    put_u64(root, "cg mem/jobs/projd/memory.limit_in_bytes", 9223372036854771712ull);
    put_u64(root, "cg mem/jobs/projd/memory.usage_in_bytes", 5 * GIB);
    put_u64(root, "cg mem/jobs/memory.limit_in_bytes", 12 * GIB);
    put_u64(root, "cg mem/jobs/memory.usage_in_bytes", 4 * GIB);
    put_u64(root, "cg mem/memory.limit_in_bytes", 9223372036854771712ull);
    put_u64(root, "cg mem/memory.usage_in_bytes", 50 * GIB);
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_uint_eq(h.avail, 8 * GIB);
    ck_assert_str_eq(h.cgroup, "/jobs");
    /* A limit file that holds no number is not read as one. */
    put(root, "cg mem/jobs/memory.limit_in_bytes", "twelve\n");
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_uint_eq(h.avail, 64 * GIB);
}
END_TEST

/* Several mounts of one hierarchy: a container given the host's
 * /sys/fs/cgroup over its own view (the later mount, of the hierarchy's
 * root, wins: the container's cgroup is read where that mount shows it),
 * and a mount of another part of the hierarchy (not the process's: never
 * read, however full it is). */
START_TEST(v1_mounts_over_and_beside)
{
    char root[4200];
    pj_hostmem h;
    host_dir(root, sizeof root, "v1over");
    put_meminfo(root, 100 * GIB, 0);
    put(root, "proc/self/cgroup", "4:memory:/docker/abc\n");
    put(root, "proc/self/mountinfo",
        "35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "60 35 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
    put_u64(root, "sys/fs/cgroup/memory/memory.limit_in_bytes", 9223372036854771712ull);
    put_u64(root, "sys/fs/cgroup/memory/memory.usage_in_bytes", 50 * GIB);
    put_u64(root, "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", GIB);
    put_u64(root, "sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes", 0);
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_uint_eq(h.avail, GIB);
    ck_assert_str_eq(h.cgroup, "/docker/abc");

    host_dir(root, sizeof root, "v1beside");
    put_meminfo(root, 64 * GIB, 0);
    put(root, "proc/self/cgroup", "4:memory:/b/svc\n");
    put(root, "proc/self/mountinfo", "35 31 0:32 /a /mnt/a rw - cgroup cgroup rw,memory\n");
    put_u64(root, "mnt/a/memory.limit_in_bytes", GIB);
    put_u64(root, "mnt/a/memory.usage_in_bytes", GIB);
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_uint_eq(h.avail, 64 * GIB); /* /a is not this process's */
    ck_assert_int_eq(h.cg_version, 0);
    put(root, "proc/self/mountinfo",
        "35 31 0:32 /a /mnt/a rw - cgroup cgroup rw,memory\n"
        "36 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
    put_u64(root, "sys/fs/cgroup/memory/b/svc/memory.limit_in_bytes", 8 * GIB);
    put_u64(root, "sys/fs/cgroup/memory/b/svc/memory.usage_in_bytes", 0);
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_uint_eq(h.avail, 8 * GIB);
    ck_assert_str_eq(h.cgroup, "/b/svc");
}
END_TEST

/* A later mount at the same point, of a part of the hierarchy that is not
 * the process's (a container given another cgroup's view over its own):
 * the earlier mount is hidden, so its path is not read through the later
 * one (that would read another cgroup's files as this one's); no cgroup
 * is read. A mount made on the cgroup's mount point's parent later, not
 * over it, hides it too; one it is mounted on does not. */
START_TEST(cgroup_mount_hidden)
{
    char root[4200];
    pj_hostmem h;
    host_dir(root, sizeof root, "v2hidden");
    put_meminfo(root, 100 * GIB, 0);
    put(root, "proc/self/cgroup", "0::/\n");
    put(root, "proc/self/mountinfo",
        "700 650 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup rw\n"
        "800 700 0:30 /../sibling /sys/fs/cgroup rw - cgroup2 cgroup rw\n");
    put_u64(root, "sys/fs/cgroup/memory.max", 2 * GIB);
    put_u64(root, "sys/fs/cgroup/memory.current", 0);
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_int_eq(h.cg_version, 0);
    ck_assert_uint_eq(h.avail, 100 * GIB);
    /* /sys/fs mounted over later: hidden as well */
    put(root, "proc/self/mountinfo",
        "600 1 0:20 / /sys rw - sysfs sysfs rw\n"
        "700 600 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup rw\n"
        "900 600 0:40 / /sys/fs rw - tmpfs tmpfs rw\n");
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_int_eq(h.cg_version, 0);
    /* the mounts it sits on, listed after it (an order a move can make):
     * not hiding it */
    put(root, "proc/self/mountinfo",
        "700 600 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup rw\n"
        "600 1 0:20 / /sys rw - sysfs sysfs rw\n"
        "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n");
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_int_eq(h.cg_version, 2);
    ck_assert_uint_eq(h.avail, 2 * GIB);
    ck_assert_str_eq(h.cgroup, "/");
}
END_TEST

/* A cgroup above the process's cgroup namespace ("/../x"): no mount here
 * shows it, so none is read. */
START_TEST(cgroup_outside_the_namespace)
{
    char root[4200];
    pj_hostmem h;
    host_dir(root, sizeof root, "v2up");
    put_meminfo(root, 10 * GIB, 0);
    put(root, "proc/self/cgroup", "0::/../other\n");
    put(root, "proc/self/mountinfo", "27 22 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
    put_u64(root, "sys/fs/cgroup/memory.max", GIB);
    put_u64(root, "sys/fs/cgroup/memory.current", 0);
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_uint_eq(h.avail, 10 * GIB);
    ck_assert_int_eq(h.cg_version, 0);
}
END_TEST

/* A cgroup named but not mounted (a process that cannot see the
 * hierarchy): /proc/meminfo's figures alone. */
START_TEST(cgroup_not_mounted)
{
    char root[4200];
    pj_hostmem h;
    host_dir(root, sizeof root, "nomount");
    put_meminfo(root, 10 * GIB, MIB);
    put(root, "proc/self/cgroup", "0::/system.slice/projd@0.service\n");
    put(root, "proc/self/mountinfo", "22 1 0:21 / / rw,relatime - ext4 /dev/sda1 rw\n");
    ck_assert_int_eq(pj_hostmem_read(root, &h), 0);
    ck_assert_uint_eq(h.avail, 10 * GIB);
    ck_assert_uint_eq(h.swap, MIB);
    ck_assert_int_eq(h.cg_version, 0);
}
END_TEST

/* This machine's own figures: read (every kernel since 3.14 has
 * MemAvailable), and never above MemAvailable (a cgroup at its limit may
 * leave 0). */
START_TEST(this_host)
{
    pj_hostmem h;
    ck_assert_int_eq(pj_hostmem_read(NULL, &h), 0);
    ck_assert_uint_gt(h.mem_avail, 0);
    ck_assert_uint_le(h.avail, h.mem_avail);
    ck_assert_uint_le(h.swap, h.swap_free);
}
END_TEST

static Suite *hostmem_suite(void)
{
    Suite *s = suite_create("hostmem");
    TCase *tc = tcase_create("read");
    tcase_add_test(tc, meminfo_alone);
    tcase_add_test(tc, v2_unit_limit);
    tcase_add_test(tc, v2_memory_high_apart);
    tcase_add_test(tc, v2_namespaced_container);
    tcase_add_test(tc, v1_container_limit);
    tcase_add_test(tc, v1_nested_escaped_mount);
    tcase_add_test(tc, v1_mounts_over_and_beside);
    tcase_add_test(tc, cgroup_mount_hidden);
    tcase_add_test(tc, cgroup_outside_the_namespace);
    tcase_add_test(tc, cgroup_not_mounted);
    tcase_add_test(tc, this_host);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* made here, so that the suite's exit removes it even when a case's
     * child fails and skips its own exit handlers */
    if (!pj_fixture_tmpdir())
        return 1;
    SRunner *sr = srunner_create(hostmem_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
