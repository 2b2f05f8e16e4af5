/* testrng.h — the suites' deterministic random numbers: splitmix64, with
 * uniform doubles in [0, 1) and Box-Muller normals on top. Header-only so
 * each suite keeps its own state and its sequences stay what they were. */
#ifndef PJ_TESTRNG_H
#define PJ_TESTRNG_H

#include <math.h>
#include <stdint.h>

static inline uint64_t sm_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline double sm_unit(uint64_t *s)
{
    return (double)(sm_next(s) >> 11) * 0x1p-53;
}

static inline double sm_normal(uint64_t *s)
{
    double u1 = sm_unit(s), u2 = sm_unit(s);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
