/* statsview.h — a daemon's STATS document shortened for a person to read
 * (`projctl stats`).
 *
 * Three lists grow with the model: model.layers (one entry a layer), the
 * per-layer counters under "layers", and the cuda backend's
 * backend_stats.engines (one row a layer, or row class, and m). For a whole model (128
 * layers for an 8B, up to 1024) they are thousands of lines of flattened
 * output and hide the counters an operator looks for. */
#ifndef PJ_STATSVIEW_H
#define PJ_STATSVIEW_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* A model of more layers than this has its lists summarized. */
#define PJ_STATSVIEW_LIST_MAX 32

/* Shortens doc in place when its model has more than PJ_STATSVIEW_LIST_MAX
 * layers (model.layers, else the "layers" counters, tell how many); a
 * smaller model's document is left whole. model.layers becomes its count;
 * "layers" keeps the layers that have served requests (ops > 0);
 * backend_stats.engines becomes an object of engine name -> rows, in the
 * order the engines first appear. Appends to left (a string, NUL-terminated, of leftlen bytes;
 * truncated if short) what was left out, "; "-separated; leaves it as it
 * was when nothing was. A document without these lists is not changed. */
void pj_statsview_summarize(cJSON *doc, char *left, size_t leftlen);

#endif
