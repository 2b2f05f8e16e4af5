/* servedmodel.h — the model a running daemon serves, as its STATS says
 * (model.path; each layer's name, tensor, format and digest,
 * daemon/digest.h), for the clients
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
        char tensor[PJ_CFG_PATH]; /* "" when STATS names none (an older daemon) */
        char format[16];          /* "bf16", "z12", "split"; "" when not said */
        uint32_t digest;
        int has_digest;
    } layers[PJ_CFG_MAX_LAYERS];
} pj_served_model;

/* STATS of c into *out. 0, or a negative errno with err said. */
int pj_served_model_get(projd_conn *c, pj_served_model *out, char *err, size_t errlen);

/* cfg's layer list replaced by the daemon's (each layer's name, tensor and
 * format; no max_n, engine or table name, which a result does not depend
 * on): how a client given no config of its own loads the served file, so
 * that a daemon whose layers are not the built-in five can be checked.
 * A z12 layer is loaded as bf16 (the same numbers, without the
 * conversion). 1 when applied; 0, cfg unchanged, when STATS listed no
 * layers or one without its tensor (a daemon older than the field). */
int pj_served_model_config(const pj_served_model *sm, pj_config *cfg);

/* Which layer list a client read the model file with, for its messages:
 * the daemon's (served: pj_served_model_config applied), else its
 * --config's (config), else the built-in one. */
const char *pj_served_model_layers_said(int served, int config);

/* Is layer `name` of m (loaded from `file`) the bytes the daemon serves?
 * 0 when its digest matches or the daemon gave none for it; -EINVAL with
 * err naming both digests when they differ. */
int pj_served_model_same(const pj_served_model *sm, const pj_model *m, const char *name,
                         const char *file, char *err, size_t errlen);

#endif
