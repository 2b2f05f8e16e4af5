/* tablepick.h — the installed tuning table a GPU without one of its own
 * name takes: the nearest by device name.
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

/* How near two device names are: the number of leading words they share
 * (words: runs of letters and digits, case ignored). "NVIDIA H100 PCIe"
 * and "NVIDIA H100 80GB HBM3": 2; and "NVIDIA H200": 1. */
int pj_tablepick_nearness(const char *device, const char *table_device);

/* Among dir's *.json that load as tuning tables and name a device, the
 * one nearest to device (ties: the sm_count nearer to sm_count, then the
 * first file name in byte order). 1 with its path in path and its device
 * in table_device; 0 when dir holds none (or cannot be read). */
int pj_tablepick_nearest(const char *dir, const char *device, int sm_count, char *path,
                         size_t pathlen, char *table_device, size_t devlen);

#endif
