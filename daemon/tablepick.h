/* tablepick.h — where the cuda backend looks for tuning tables, and the
 * installed table a GPU without one of its own name takes: the nearest by
 * device name.
 *
 * The cuda backend looks for <gpu>.json first (daemon/CUDA.md, "Engines").
 * Hopper GPUs come in more models than tables are tuned for (H100 PCIe and
 * NVL, H200 NVL, GH200, H800), and without a table a daemon runs the
 * untuned ladder, which is no faster than SGLang's cuBLAS path: on an
 * H100 80GB HBM3 it scored 1.010x, the H200's table 1.233x and the H100's
 * own 1.241x, in one visit (bench/results/2026-12-05-s49/). Another
 * Hopper's table, its entries checked against this device's limits,
 * keeps most of the gain; the nearer the model, the more. */
#ifndef PJ_TABLEPICK_H
#define PJ_TABLEPICK_H

#include <stddef.h>

#define PJ_TABLEPICK_DIRS 3
#define PJ_TABLEPICK_PATH 1024

/* The folders tables are looked for in, in order: env alone when it is
 * set and not empty ($PROJD_TUNING_DIR: an operator or a test that names
 * a folder means that one), else the install's beside the binary in
 * exe_dir: ../share/projd/tuning, then a build tree's ../../config/tuning
 * and ../config/tuning. A folder whose path does not fit is left out (a
 * cut path would name another folder). The count. */
int pj_tablepick_dirs(const char *env, const char *exe_dir,
                      char dirs[PJ_TABLEPICK_DIRS][PJ_TABLEPICK_PATH]);

/* How near two device names are: the number of leading words they share
 * (words: runs of letters and digits, case ignored). "NVIDIA H100 PCIe"
 * and "NVIDIA H100 80GB HBM3": 2; and "NVIDIA H200": 1. */
int pj_tablepick_nearness(const char *device, const char *table_device);

/* Told of a file that looked like a table and was passed over, and why. */
typedef void (*pj_tablepick_skip_fn)(void *ctx, const char *path, const char *why);

/* Among the *.json regular files of dirs that load as tuning tables and
 * name a device, the one nearest to device: one whose device has this
 * device's name word for word first, then the most leading words shared,
 * then the SM count nearer to sm_count, then the earlier folder, then the
 * first file name in byte order. A table that states a compute capability
 * must state this device's (cc_major.cc_minor), and one of another model
 * must state one: names alone cannot tell an A100's table from a Hopper's
 * ("NVIDIA" is a shared word). 1 with
 * its path in path and its device in table_device; 0 when there is none.
 * skip (may be NULL) hears of every candidate passed over: unreadable, not
 * a regular file, not a table, no device named, another or no compute
 * capability, a path that does not fit pathlen. */
int pj_tablepick_nearest(const char (*dirs)[PJ_TABLEPICK_PATH], int ndirs, const char *device,
                         int sm_count, int cc_major, int cc_minor, char *path, size_t pathlen,
                         char *table_device, size_t devlen, pj_tablepick_skip_fn skip, void *ctx);

#endif
