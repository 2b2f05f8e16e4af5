/* checkcfg.h — what `projd --check-config` runs: every check a start makes
 * before it serves that changes nothing (the backend's availability, the
 * socket's directory and file, the socket group and whether this process
 * may give the socket that group, each layer's tensor in the model file's
 * header), each problem on its own line on stderr, notes on stdout. The
 * weights themselves are not read: what only they show is left to a start.
 */
#ifndef PJ_CHECKCFG_H
#define PJ_CHECKCFG_H

#include "config/config.h"

/* 0 with one "configuration OK" line on stdout, or 1 after listing every
 * problem. url: the socket URL a start would take; url_src: where it came
 * from (for the OK line); config_file: the --config file or NULL. */
int pj_checkcfg_run(const pj_config *cfg, const char *config_file, const char *url,
                    const char *url_src);

#endif
