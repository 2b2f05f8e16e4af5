/* backend.c — creating and destroying backend instances (see backend.h).
 * Selection lives in backend_select.c so that programs linking only the
 * cpu backend (the CPU test suites) never reference the cuda symbols. */
#include "daemon/backend.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* One lock for every instance's hook: it is set twice per daemon and
 * called at most once per backend. */
static pthread_mutex_t fatal_mu = PTHREAD_MUTEX_INITIALIZER;

void pj_backend_set_fatal(pj_backend *b, void (*fn)(void *arg, const char *msg), void *arg)
{
    pthread_mutex_lock(&fatal_mu);
    b->fatal = fn;
    b->fatal_arg = arg;
    pthread_mutex_unlock(&fatal_mu);
}

void pj_backend_fatal(pj_backend *b, const char *msg)
{
    pthread_mutex_lock(&fatal_mu);
    if (b->fatal)
        b->fatal(b->fatal_arg, msg);
    pthread_mutex_unlock(&fatal_mu);
}

int pj_backend_create(const pj_backend_ops *ops, const pj_config *cfg, const pj_model *model,
                      pj_backend **out, char *err, size_t errlen)
{
    *out = NULL;
    pj_backend *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(err, errlen, "backend %s: out of memory", ops->name);
        return -ENOMEM;
    }
    b->ops = ops;
    b->cfg = cfg;
    b->model = model;
    b->stream_depth = ops->stream_depth;
    int rc = ops->open(b, err, errlen);
    if (rc != 0) {
        free(b);
        return rc;
    }
    *out = b;
    return 0;
}

void pj_backend_destroy(pj_backend *b)
{
    if (!b)
        return;
    b->ops->close(b);
    free(b);
}
