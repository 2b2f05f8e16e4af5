/* arrivals.h — when an open-loop run's requests are due: evenly at a rate
 * (--rate) or as a Poisson process (--poisson), the same times for the
 * same seed on every run and every machine. */
#ifndef PJ_ARRIVALS_H
#define PJ_ARRIVALS_H

#include <stdint.h>

/* splitmix64's finalizer: 64 well-mixed bits of x. Nearby inputs give
 * unrelated outputs, which is what a seed needs (projload's per-client
 * and per-request streams are keyed through it too). */
uint64_t pj_splitmix64(uint64_t x);

typedef struct pj_arrivals {
    double rate;    /* requests per second, > 0 */
    int poisson;    /* exponential gaps of mean 1/rate, else 1/rate each */
    uint64_t state; /* the gaps' random stream (splitmix64 over a counter) */
    uint64_t i;     /* requests given so far */
    double t_s;     /* the last one's due time */
} pj_arrivals;

/* Due times for seed at rate (requests per second, > 0). */
void pj_arrivals_init(pj_arrivals *a, uint64_t seed, double rate, int poisson);

/* The next request's due time, in seconds after the run's start (the
 * first is due at 0). */
double pj_arrivals_next(pj_arrivals *a);

#endif
