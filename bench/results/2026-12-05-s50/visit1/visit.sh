#!/usr/bin/env bash
# Session 50, visit 1, first call: bench/final-check.sh on main (the GPU
# suites under MPS with SGLang's wheels, the fault tests, the benchmark of
# the committed table twice). Owed since session 49: the table search's
# later forms (442fd7e, 2a3e1d4, ae8db3d) have run only on the CPU, and
# test_cuda_backend's T3 runs them on the GPU.
. bench/visit-common.sh
pj_site_wheels || exit 1
pj_final_check
