#!/usr/bin/env bash
# Session 44, visit 2: bench/final-check.sh on the session's last code
# (the GPU suites under MPS with SGLang's wheels, the fault tests, the
# benchmark of the committed table twice). No kernel or table changed; the
# suites load the tuning table through the session's stricter parser.
. bench/visit-common.sh
pj_site_wheels || exit 1
pj_final_check
