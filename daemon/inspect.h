/* inspect.h — what a model becomes when projd loads it, as a table or JSON.
 *
 * Loads the model exactly as the daemon would (pj_model_load, with the
 * round-trip verification) and reports per layer: name, tensor, N x K,
 * source dtype, stored format, stored bytes / bf16 bytes and their ratio,
 * z12 exceptions (count and rate) and window (e7 [base, base+7] and the
 * magnitude range it covers), then a total line. `projctl inspect` calls it.
 */
#ifndef PJ_INSPECT_H
#define PJ_INSPECT_H

#include <stddef.h>
#include <stdio.h>

#include "config/config.h"

/* Print the report for model_path (NULL: cfg->model.path) with cfg's layer
 * list (cfg NULL: the built-in defaults) to out; json = 1 prints one JSON
 * document instead of the table. Load warnings are part of the report.
 * Returns 0, or the load's error (err: one line) with nothing printed. */
int pj_inspect_print(FILE *out, const pj_config *cfg, const char *model_path, int json, char *err,
                     size_t errlen);

#endif
