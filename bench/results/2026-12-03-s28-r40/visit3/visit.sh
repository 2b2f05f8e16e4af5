#!/usr/bin/env bash
# Round 40, visit 3: ncu of pipe 7 (o m = 1, nw 8; qkv_gate m = 16, nw
# 16), per-instruction stall samples: where a warp's time per tile goes.
. bench/visit-common.sh
PJ_DEV=$B NCU_LIST=bench/results/2026-12-03-s28-r40/visit3/ncu.txt OUT=$OUT timeout 400 bash bench/ncu-deep.sh 2>&1 | tail -60
