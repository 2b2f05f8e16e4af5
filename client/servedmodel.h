/* servedmodel.h — the model a running daemon serves, as its STATS says
 * (model.path and each layer's digest, daemon/digest.h), for the clients
 * that check results against a model file of their own (projctl project
 * --check, projload --model): a file that is not the daemon's model is
 * said as such before any result is compared, instead of as thousands of
 * mismatches, and a client given no file can use the daemon's. */
#ifndef PJ_CLIENT_SERVEDMODEL_H
#define PJ_CLIENT_SERVEDMODEL_H

#include <stddef.h>
#include <stdint.h>

#include "client/projd.h"
#include "config/config.h"
#include "daemon/model.h"

typedef struct pj_served_model {
    char path[PJ_CFG_PATH]; /* "" when STATS names none */
    uint32_t n_layers;
    struct {
        char name[PJ_CFG_NAME];
        uint32_t digest;
        int has_digest;
    } layers[PJ_CFG_MAX_LAYERS];
} pj_served_model;

/* STATS of c into *out. 0, or a negative errno with err said. */
int pj_served_model_get(projd_conn *c, pj_served_model *out, char *err, size_t errlen);

/* Is layer `name` of m (loaded from `file`) the bytes the daemon serves?
 * 0 when its digest matches or the daemon gave none for it; -EINVAL with
 * err naming both digests when they differ. */
int pj_served_model_same(const pj_served_model *sm, const pj_model *m, const char *name,
                         const char *file, char *err, size_t errlen);

#endif
