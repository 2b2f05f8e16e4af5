#!/usr/bin/env bash
# Session 52, visit 2: bench/final-check.sh on the session's code, which has
# not run on a GPU: session 51's (the server's shm span probes at arrival
# and completion, max_row_pitch refused at arrival, test_cuda_backend's
# sections H and P changed to expect them; the client lookup, the socket
# path checks, the per-uid connection cap, projd_sglang's reload refusal
# and device check) and this session's (pj_span_bytes; the cpu backend's
# stream depth, which the cuda build links but does not use). The kernels
# and the tuning table are session 45's.
. bench/visit-common.sh
pj_site_wheels || exit 1
pj_final_check
