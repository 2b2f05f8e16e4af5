#!/usr/bin/env bash
# Session 43, visit 2 — PLANNED, NOT RUN (no device was lent in session 43).
# bench/final-check.sh on the session's last code: the GPU suites under MPS
# (with SGLang's wheels, so python_sglang runs too), the fault tests, and
# the benchmark of the committed table twice. The kernels are unchanged;
# what the suites check anew is the host side of the format (the z12 pack
# that every gemvz engine's weights come from, and the unpack of the bf16
# copies), the start's memory plan, and the session's daemon changes. At
# most 8 files come back.
. bench/visit-common.sh
pj_site_wheels || exit 1
pj_final_check
