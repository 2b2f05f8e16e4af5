/* fuzz_config.c — libFuzzer harness for the config parser.
 *
 * Feeds arbitrary bytes to pj_config_apply_json on a copy of the defaults
 * and checks the promises the parser makes beyond "does not crash":
 * a refused document leaves the target byte-for-byte unchanged and yields a
 * non-empty one-line message; an accepted one renders to JSON that applies
 * back to the defaults as the very same struct. An accepted document is also
 * what SIGHUP would load over the defaults: pj_config_check_reload must let
 * it through exactly when it changed nothing but the reloadable sections
 * (limits, auth, log: the ones projd_main copies), and say why in one line
 * when it does not; a config always reloads over itself. */
#include "config/config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static pj_config defaults;
static int have_defaults;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!have_defaults) {
        if (pj_config_defaults(&defaults) != 0)
            abort();
        have_defaults = 1;
    }
    pj_config *cfg = malloc(sizeof *cfg);
    if (cfg == NULL)
        return 0;
    memcpy(cfg, &defaults, sizeof *cfg);

    char err[512];
    int rc = pj_config_apply_json(cfg, (const char *)data, size, err, sizeof err);
    if (rc != 0) {
        if (memcmp(cfg, &defaults, sizeof *cfg) != 0)
            abort(); /* half-applied */
        if (err[0] == '\0' || strchr(err, '\n') != NULL)
            abort(); /* messages are one non-empty line */
    } else {
        char *text = pj_config_to_json(cfg);
        if (text != NULL) {
            pj_config *back = malloc(sizeof *back);
            if (back != NULL) {
                memcpy(back, &defaults, sizeof *back);
                if (pj_config_apply_json(back, text, strlen(text), err, sizeof err) != 0)
                    abort(); /* the renderer wrote something the parser refuses */
                if (memcmp(back, cfg, sizeof *cfg) != 0)
                    abort(); /* the round trip lost something */
                /* The reload oracle: the defaults with cfg's reloadable
                 * sections copied in (memcpy, so padding matches too). */
                memcpy(back, &defaults, sizeof *back);
                memcpy(&back->limits, &cfg->limits, sizeof back->limits);
                memcpy(&back->auth, &cfg->auth, sizeof back->auth);
                memcpy(&back->log, &cfg->log, sizeof back->log);
                int only_reloadable = memcmp(back, cfg, sizeof *cfg) == 0;
                err[0] = '\0';
                int rrc = pj_config_check_reload(&defaults, cfg, err, sizeof err);
                if ((rrc == 0) != only_reloadable)
                    abort(); /* reload let a restart-only change through, or refused a good one */
                if (rrc != 0 && (err[0] == '\0' || strchr(err, '\n') != NULL))
                    abort();
                if (pj_config_check_reload(cfg, cfg, err, sizeof err) != 0)
                    abort();
                free(back);
            }
            free(text);
        }
    }
    free(cfg);
    return 0;
}
