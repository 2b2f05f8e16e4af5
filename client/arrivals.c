/* arrivals.c — see arrivals.h. */
#include "client/arrivals.h"

#include <math.h>

uint64_t pj_splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void pj_arrivals_init(pj_arrivals *a, uint64_t seed, double rate, int poisson)
{
    a->rate = rate;
    a->poisson = poisson;
    /* The stream counts up from its start, so the start is mixed: started
     * at seed ^ constant, seeds 1, 2, 3 began a few steps apart on one
     * counter and their gaps were the same sequence shifted by a few. */
    a->state = pj_splitmix64(seed ^ 0x5851f42d4c957f2dull);
    a->i = 0;
    a->t_s = 0;
}

double pj_arrivals_next(pj_arrivals *a)
{
    if (!a->poisson) {
        a->t_s = (double)a->i / a->rate;
    } else if (a->i > 0) {
        const double u = (double)(pj_splitmix64(a->state++) >> 11) * 0x1p-53; /* [0, 1) */
        a->t_s += -log(1.0 - u) / a->rate;
    }
    a->i++;
    return a->t_s;
}
