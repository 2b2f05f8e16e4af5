/* shmguard.c — see shmguard.h. */
#include "daemon/shmguard.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct guard_slot {
    atomic_uintptr_t base; /* 0 = free */
    atomic_size_t len;
    atomic_int faulted;
    /* Odd while add or remove changes base and len: the handler, which
     * reads them without a lock, must not pair one range's base with the
     * next one's len (a slot freed and taken again between its two loads
     * would put zero pages over memory that is not a guarded range). */
    atomic_uint gen;
} guard_slot;

/* base and len of slot i as one consistent pair; 0 when free. */
static uintptr_t slot_range(guard_slot *g, size_t *len)
{
    for (;;) {
        unsigned g1 = atomic_load_explicit(&g->gen, memory_order_acquire);
        if (g1 & 1)
            continue; /* a change in progress on another thread: a few stores */
        uintptr_t base = atomic_load_explicit(&g->base, memory_order_acquire);
        *len = atomic_load_explicit(&g->len, memory_order_acquire);
        if (atomic_load_explicit(&g->gen, memory_order_acquire) == g1)
            return base;
    }
}

static guard_slot g_slots[PJ_SHMGUARD_SLOTS];
static struct sigaction g_prev;
static atomic_int g_installed;
static atomic_ulong g_faults;
static size_t g_page;

static void on_sigbus(int sig, siginfo_t *si, void *uctx)
{
    uintptr_t a = (uintptr_t)si->si_addr;
    /* A SIGBUS some process sent (kill, sigqueue, tgkill: si_code <= 0) is
     * no fault: si_addr holds the sender's pid and uid, not an address, and
     * no access is retried to end the process. */
    int sent = si->si_code <= 0;
    for (size_t i = 0; !sent && i < PJ_SHMGUARD_SLOTS; i++) {
        size_t len;
        uintptr_t base = slot_range(&g_slots[i], &len);
        if (!base || a < base || a - base >= len)
            continue;
        /* The whole range at once, not the faulting page: a private page
         * inside a shared mapping splits it, and a client that makes every
         * other page fault (one PROJECT of scattered rows over a truncated
         * buffer) would add two map entries a fault until mmap failed at
         * vm.max_map_count and the daemon died of the SIGBUS after all.
         * The range's contents no longer matter: it is marked faulted, and
         * what touched it is answered with an error. NORESERVE: ranges can
         * be gigabytes. Only if that mapping is refused (strict overcommit)
         * does one page stand in, as before. */
        uintptr_t lo = base & ~(uintptr_t)(g_page - 1);
        uintptr_t hi = (base + len + g_page - 1) & ~(uintptr_t)(g_page - 1);
        void *p = mmap((void *)lo, hi - lo, PROT_READ | PROT_WRITE,
                       MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            p = mmap((void *)(a & ~(uintptr_t)(g_page - 1)), g_page, PROT_READ | PROT_WRITE,
                     MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            break;
        atomic_store(&g_slots[i].faulted, 1);
        atomic_fetch_add(&g_faults, 1);
        return; /* the faulting access is retried and now succeeds */
    }
    /* Not ours: hand the signal to whoever had it before. */
    if (g_prev.sa_flags & SA_SIGINFO) {
        g_prev.sa_sigaction(sig, si, uctx);
        return;
    }
    if (g_prev.sa_handler != SIG_DFL && g_prev.sa_handler != SIG_IGN) {
        g_prev.sa_handler(sig);
        return;
    }
    /* Default action: restore it; returning re-executes the access, which
     * faults again and terminates the process with SIGBUS. A sent signal
     * has no access to re-execute: it is raised again (it was swallowed,
     * so 'kill -BUS' left the daemon running where it would have died). */
    signal(SIGBUS, SIG_DFL);
    if (sent)
        raise(sig);
}

int pj_shmguard_install(void)
{
    if (atomic_exchange(&g_installed, 1))
        return 0;
    g_page = (size_t)sysconf(_SC_PAGESIZE);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &g_prev) != 0) {
        atomic_store(&g_installed, 0);
        return -errno;
    }
    return 0;
}

int pj_shmguard_add(void *base, size_t len)
{
    for (int i = 0; i < PJ_SHMGUARD_SLOTS; i++) {
        uintptr_t expect = 0;
        /* Claim with a placeholder base of 1: a free slot's len is 0 (remove
         * clears it first), so the handler never matches a half-set slot. */
        if (atomic_compare_exchange_strong(&g_slots[i].base, &expect, (uintptr_t)1)) {
            atomic_fetch_add(&g_slots[i].gen, 1);
            atomic_store(&g_slots[i].faulted, 0);
            atomic_store(&g_slots[i].len, len);
            atomic_store_explicit(&g_slots[i].base, (uintptr_t)base, memory_order_release);
            atomic_fetch_add(&g_slots[i].gen, 1);
            return i;
        }
    }
    return -ENOSPC;
}

void pj_shmguard_remove(int slot)
{
    if (slot < 0 || slot >= PJ_SHMGUARD_SLOTS)
        return;
    /* base goes to 0 last: until then add cannot claim the slot, so the
     * two never change it at once (remove runs on the closer's thread). */
    atomic_fetch_add(&g_slots[slot].gen, 1);
    atomic_store(&g_slots[slot].len, 0);
    atomic_fetch_add(&g_slots[slot].gen, 1);
    atomic_store(&g_slots[slot].base, 0);
}

int pj_shmguard_faulted(int slot)
{
    if (slot < 0 || slot >= PJ_SHMGUARD_SLOTS)
        return 0;
    return atomic_load(&g_slots[slot].faulted);
}

unsigned long pj_shmguard_total_faults(void)
{
    return atomic_load(&g_faults);
}
