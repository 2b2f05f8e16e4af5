#!/usr/bin/env bash
# Session 45, visit 2: bench/final-check.sh on the session's code (the GPU
# suites under MPS with SGLang's wheels, the fault tests, the benchmark of
# the committed table twice). No kernel or table changed this session; the
# host side did (files replaced whole through one helper, the tuner's
# tuned_as names).
. bench/visit-common.sh
pj_site_wheels || exit 1
pj_final_check
