/* servedmodel.c — see servedmodel.h. */
#include "client/servedmodel.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pj_served_model_get(projd_conn *c, pj_served_model *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    char *json = NULL;
    projd_error e;
    int rc = projd_stats_json(c, &json, &e);
    if (rc) {
        snprintf(err, errlen, "STATS: %s", e.msg);
        return rc < 0 ? rc : -EIO;
    }
    cJSON *doc = cJSON_Parse(json);
    free(json);
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(doc, "model");
    if (!cJSON_IsObject(md)) {
        cJSON_Delete(doc);
        snprintf(err, errlen, "STATS has no \"model\" object");
        return -EPROTO;
    }
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(md, "path");
    if (cJSON_IsString(p))
        snprintf(out->path, sizeof out->path, "%s", p->valuestring);
    const cJSON *l;
    cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(md, "layers"))
    {
        if (out->n_layers >= PJ_CFG_MAX_LAYERS)
            break;
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(l, "name");
        const cJSON *dg = cJSON_GetObjectItemCaseSensitive(l, "digest");
        const cJSON *tn = cJSON_GetObjectItemCaseSensitive(l, "tensor");
        const cJSON *fm = cJSON_GetObjectItemCaseSensitive(l, "format");
        if (!cJSON_IsString(name))
            continue;
        snprintf(out->layers[out->n_layers].name, PJ_CFG_NAME, "%s", name->valuestring);
        if (cJSON_IsString(tn))
            snprintf(out->layers[out->n_layers].tensor, PJ_CFG_PATH, "%s", tn->valuestring);
        if (cJSON_IsString(fm))
            snprintf(out->layers[out->n_layers].format, sizeof out->layers[0].format, "%s",
                     fm->valuestring);
        char *end = NULL;
        if (cJSON_IsString(dg) && dg->valuestring[0]) {
            unsigned long v = strtoul(dg->valuestring, &end, 16);
            if (!*end && v <= 0xffffffffu) {
                out->layers[out->n_layers].digest = (uint32_t)v;
                out->layers[out->n_layers].has_digest = 1;
            }
        }
        out->n_layers++;
    }
    cJSON_Delete(doc);
    return 0;
}

int pj_served_model_config(const pj_served_model *sm, pj_config *cfg)
{
    if (sm->n_layers == 0)
        return 0;
    for (uint32_t i = 0; i < sm->n_layers; i++) {
        if (!sm->layers[i].tensor[0])
            return 0;
    }
    cfg->model.n_layers = sm->n_layers;
    for (uint32_t i = 0; i < sm->n_layers; i++) {
        pj_layer_config *L = &cfg->model.layers[i];
        memset(L, 0, sizeof *L);
        snprintf(L->name, sizeof L->name, "%s", sm->layers[i].name);
        snprintf(L->tensor, sizeof L->tensor, "%s", sm->layers[i].tensor);
        /* split computes other numbers than bf16 from the same tensor (hi +
         * lo of f32 or f16); z12 the same numbers as bf16. */
        L->format = !strcmp(sm->layers[i].format, "split") ? PJ_FPREF_SPLIT : PJ_FPREF_BF16;
        if (!sm->layers[i].format[0])
            L->format = PJ_FPREF_AUTO;
    }
    return 1;
}

const char *pj_served_model_layers_said(int served, int config)
{
    return served   ? "the daemon's layers, from STATS"
           : config ? "the layers of --config"
                    : "the built-in layers";
}

int pj_served_model_same(const pj_served_model *sm, const pj_model *m, const char *name,
                         const char *file, char *err, size_t errlen)
{
    int mi = pj_model_find(m, name);
    if (mi < 0)
        return 0;
    for (uint32_t i = 0; i < sm->n_layers; i++) {
        if (strcmp(sm->layers[i].name, name) != 0 || !sm->layers[i].has_digest)
            continue;
        if (sm->layers[i].digest == m->layers[mi].digest)
            return 0;
        snprintf(err, errlen,
                 "layer %s of %s has digest %08x, the daemon's has %08x: not the model the daemon "
                 "serves%s%s%s",
                 name, file, m->layers[mi].digest, sm->layers[i].digest,
                 sm->path[0] ? " (it serves " : "", sm->path, sm->path[0] ? ")" : "");
        return -EINVAL;
    }
    return 0;
}
