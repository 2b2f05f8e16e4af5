/* fixture.h — shared test fixtures: a per-process temp directory and the
 * generated small model.
 *
 * Check runs each test in a forked child by default; anything a fixture
 * creates inside a test lives only as long as that child. A suite that wants
 * one model for all its tests calls pj_fixture_small_model from main()
 * before srunner_run_all. Everything is removed when the creating process
 * exits.
 */
#ifndef PJ_TEST_FIXTURE_H
#define PJ_TEST_FIXTURE_H

#include <stddef.h>

#include "config/config.h"

/* A private directory (mkdtemp under $TMPDIR or /tmp), created on first
 * use, removed with its contents when the creating process exits. NULL if
 * it cannot be created. */
const char *pj_fixture_tmpdir(void);

/* Write "<tmpdir>/<name>" into out (cap bytes); returns out. */
char *pj_fixture_path(char *out, size_t cap, const char *name);

/* The text of the file at path in buf (cap bytes, NUL-terminated; what
 * does not fit is left out). Its length, or -1 when it cannot be opened. */
long pj_fixture_read_text(const char *path, char *buf, size_t cap);

/* path's whole content is text (created or truncated): 0, or -1 when it
 * cannot be opened or written. */
int pj_fixture_write_text(const char *path, const char *text);

/* pj_fixture_write_text of dir/rel, the folders of rel made first where
 * they are not there (a tree of files under a directory of the test's). */
int pj_fixture_write_under(const char *dir, const char *rel, const char *text);

/* Lines of /proc/<pid>/maps (pid 0: this process): the mappings a process
 * has. -1 when the file cannot be read. */
int pj_fixture_count_maps(int pid);

/* Files beside path named as pj_replacing's temporaries of it (the base
 * name, then ".tmp"): what a replaced file's write left behind. -1 when
 * the directory cannot be read. */
int pj_fixture_temporaries(const char *path);

/* Generate the small preset (seed 1) once per process and copy its path to
 * path_out. Returns 0 or a negative errno (the reason goes to stderr). */
int pj_fixture_small_model(char *path_out, size_t cap);

/* Defaults (pj_config_defaults) with model.path = model_path. */
void pj_fixture_small_config(pj_config *cfg, const char *model_path);

#endif
