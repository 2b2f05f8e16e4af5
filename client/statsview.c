/* statsview.c — STATS documents shortened for a person to read (see
 * statsview.h). */
#include "client/statsview.h"

#include <stdio.h>
#include <string.h>

void pj_statsview_summarize(cJSON *doc, char *left, size_t leftlen)
{
    if (!leftlen)
        return;
    size_t at = strnlen(left, leftlen - 1);
#define LEFT(...)                                                                                  \
    do {                                                                                           \
        int n_ = snprintf(left + at, leftlen - at, __VA_ARGS__);                                   \
        at = n_ < 0 || (size_t)n_ >= leftlen - at ? leftlen - 1 : at + (size_t)n_;                 \
    } while (0)
    /* The model's size decides for all three lists: the engines have a row
     * per layer and m, so a small model's is longer than its layers. */
    cJSON *model = cJSON_GetObjectItemCaseSensitive(doc, "model");
    cJSON *ml = model ? cJSON_GetObjectItemCaseSensitive(model, "layers") : NULL;
    cJSON *ls = cJSON_GetObjectItemCaseSensitive(doc, "layers");
    int n_model = cJSON_IsArray(ml) ? cJSON_GetArraySize(ml) : 0;
    int n_ls = cJSON_IsObject(ls) ? cJSON_GetArraySize(ls) : 0;
    if ((n_model > n_ls ? n_model : n_ls) <= PJ_STATSVIEW_LIST_MAX)
        return;
    if (n_model > 0) {
        cJSON *count = cJSON_CreateNumber(n_model);
        if (!count || !cJSON_ReplaceItemInObjectCaseSensitive(model, "layers", count)) {
            cJSON_Delete(count);
            return; /* out of memory: the rest printed whole */
        }
        LEFT("%s%d layers' entries in model.layers (projctl layers lists them)", at ? "; " : "",
             n_model);
    }
    if (n_ls > 0) {
        int idle = 0;
        for (cJSON *l = ls->child, *next; l; l = next) {
            next = l->next;
            const cJSON *ops = cJSON_GetObjectItemCaseSensitive(l, "ops");
            if (cJSON_IsNumber(ops) && ops->valuedouble == 0) {
                cJSON_Delete(cJSON_DetachItemViaPointer(ls, l));
                idle++;
            }
        }
        if (idle)
            LEFT("%s%d of the %d layers' counters in layers.* (no requests yet)", at ? "; " : "",
                 idle, n_ls);
    }
    cJSON *bs = cJSON_GetObjectItemCaseSensitive(doc, "backend_stats");
    cJSON *eng = bs ? cJSON_GetObjectItemCaseSensitive(bs, "engines") : NULL;
    int n_eng = cJSON_IsArray(eng) ? cJSON_GetArraySize(eng) : 0;
    if (n_eng > 0) {
        /* Rows per engine, in the order the engines first appear. */
        cJSON *by = cJSON_CreateObject();
        const cJSON *row;
        cJSON_ArrayForEach(row, eng)
        {
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(row, "engine");
            const char *name = cJSON_IsString(e) ? e->valuestring : "?";
            cJSON *cnt = cJSON_GetObjectItemCaseSensitive(by, name);
            if (cnt)
                cJSON_SetNumberValue(cnt, cnt->valuedouble + 1);
            else
                cJSON_AddNumberToObject(by, name, 1);
        }
        if (!by || !cJSON_ReplaceItemInObjectCaseSensitive(bs, "engines", by)) {
            cJSON_Delete(by);
            return;
        }
        LEFT("%sthe %d (layer, m) rows of backend_stats.engines, counted by engine", at ? "; " : "",
             n_eng);
    }
#undef LEFT
}
