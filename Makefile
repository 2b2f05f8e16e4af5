# projd — build, test and run.
#
#   make            build everything (host code, kernels, tests)
#   make run        build, generate the demo model if absent, serve it
#   make test       install missing packages (as root), build, run the CPU suites
#   make test-gpu   GPU suites (on the H200 host, see README)
#   make fuzz       libFuzzer harnesses, FUZZ_SECONDS each (default 20)
#   make fuzz-build the harnesses alone (make test replays their seeds)
#   make bench-ipc  round-trip latency table, nng and ring (cpu backend)
#   make format     clang-format every C/CUDA source
#
#   SANITIZE=address,undefined   sanitizer build (in build-address-undefined/)
#   CUDA=0                        build without the cuda backend and kernels

SHELL := /bin/bash
comma := ,

SANITIZE ?=
ifeq ($(SANITIZE),)
BUILD ?= build
else
BUILD ?= build-$(subst $(comma),-,$(SANITIZE))
endif

CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
ifeq ($(origin CUDA),undefined)
CUDA := $(if $(wildcard $(NVCC)),1,0)
endif

CC ?= gcc
ifeq ($(CC),cc)
CC := gcc
endif
OPT ?= -O2
WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -Wpointer-arith -Wformat=2 -Wno-format-nonliteral -Wundef
# override: flags given on the command line (make CFLAGS=-O1) are added to
# these, not put in their place; without it SANITIZE=, the warnings and the
# dependency files (-MMD) silently went, while the link kept -fsanitize.
override CPPFLAGS += -I. -I$(BUILD)/gen -D_GNU_SOURCE
override CFLAGS += -std=c11 $(OPT) -g -fPIC -pthread $(WARN) -MMD -MP
override LDFLAGS += -pthread -Wl,--as-needed
LIBS := -luv -lnng -lcjson -lsystemd -lm -lrt -ldl
CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null || echo -lcheck -lsubunit)

ifneq ($(SANITIZE),)
override CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
# GCC warns that TSan does not model atomic_thread_fence (the ring's
# fences); -Werror would make SANITIZE=thread unbuildable. Clang has no such
# warning, and refuses the option under -Werror.
ifneq ($(findstring thread,$(SANITIZE)),)
ifeq ($(findstring clang,$(CC)),)
override CFLAGS += -Wno-tsan
endif
endif
override LDFLAGS += -fsanitize=$(SANITIZE)
endif

ifeq ($(CUDA),1)
override CPPFLAGS += -DPJ_HAVE_CUDA=1 -I$(CUDA_HOME)/include
NVCCFLAGS ?= -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -lineinfo \
             -Xcompiler -fPIC,-Wall -Xptxas -warn-spills
# cudart is linked statically so the binaries need only libcublas at run time;
# the driver (libcuda) is reached through cudart, never linked, so the same
# binaries start on machines without a GPU and fall back to the cpu backend.
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas \
             -lcudart_static -lstdc++
endif

# ---- what the build folder was built with ---------------------------------
# Objects do not know the flags they were compiled with: a CUDA=1 build in a
# folder a CUDA=0 build made kept that build's objects (a projd without its
# cuda backend, silently). The folder remembers its settings in a stamp
# that every object depends on, rewritten (so newer than them all) when a
# build that compiles finds them changed. Not by a dry run (make -n) nor by
# the goals that compile nothing (install-files with another build's
# settings must not force that build to start over).
.DEFAULT_GOAL := all
FLAGS_STAMP := $(BUILD)/.flags
FLAGS_NOW := CUDA=$(CUDA) CC=$(CC) CPPFLAGS=$(CPPFLAGS) CFLAGS=$(CFLAGS) NVCC=$(NVCC) \
             NVCCFLAGS=$(NVCCFLAGS)
NO_COMPILE_GOALS := clean format deps install-files install-activate uninstall
ifeq ($(findstring n,$(firstword -$(MAKEFLAGS))),)
ifneq ($(filter-out $(NO_COMPILE_GOALS),$(or $(MAKECMDGOALS),all)),)
$(shell [ ! -d $(BUILD) ] || [ "$$(cat $(FLAGS_STAMP) 2>/dev/null)" = '$(FLAGS_NOW)' ] || \
        printf '%s\n' '$(FLAGS_NOW)' >$(FLAGS_STAMP))
endif
endif
# A folder made (or emptied by clean) since: its first stamp.
$(FLAGS_STAMP):
	@mkdir -p $(@D)
	@printf '%s\n' '$(FLAGS_NOW)' >$@

# ---- sources -------------------------------------------------------------
# Conventions: <dir>/<prog>_main.c is a program (binary name: underscores to
# hyphens); *_cuda.c is host code that calls CUDA; *.cu are kernels.
MODULE_DIRS := kernels config protocol daemon client
ALL_C := $(foreach d,$(MODULE_DIRS),$(wildcard $(d)/*.c))
MAIN_C := $(filter %_main.c,$(ALL_C))
CUDA_HOST_C := $(filter %_cuda.c,$(ALL_C))
CORE_C := $(filter-out $(MAIN_C) $(CUDA_HOST_C),$(ALL_C))
CU_SRC := $(foreach d,$(MODULE_DIRS),$(wildcard $(d)/*.cu))
GPU_MAIN_C := $(filter $(foreach d,$(MODULE_DIRS),$(d)/%_gpu_main.c),$(MAIN_C))
ifeq ($(CUDA),0)
MAIN_C := $(filter-out $(GPU_MAIN_C),$(MAIN_C))
endif

GEN_C := $(BUILD)/gen/default_config.c
CORE_O := $(CORE_C:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/gen/default_config.o
CUDA_O := $(CUDA_HOST_C:%.c=$(BUILD)/obj/%.o) $(CU_SRC:%.cu=$(BUILD)/obj/%.cu.o)
CORE_LIB := $(BUILD)/lib/libpjcore.a
CUDA_LIB := $(BUILD)/lib/libpjcuda.a
ifeq ($(CUDA),1)
LINK_LIBS := $(CORE_LIB) $(CUDA_LIB) $(CORE_LIB) $(LIBS) $(CUDA_LIBS)
else
LINK_LIBS := $(CORE_LIB) $(LIBS)
endif

prog_name = $(subst _,-,$(patsubst %_main,%,$(patsubst %_gpu_main,%,$(notdir $(basename $(1))))))
PROGS := $(foreach m,$(MAIN_C),$(BUILD)/bin/$(call prog_name,$(m)))

TEST_C := $(wildcard tests/test_*.c)
TESTS := $(TEST_C:tests/%.c=$(BUILD)/tests/%)
GPU_TEST_C := $(wildcard tests/gpu/*.c)
GPU_TESTS := $(GPU_TEST_C:tests/gpu/%.c=$(BUILD)/tests/gpu/%)
TEST_HELPER_C := $(wildcard tests/helpers/*.c)
TEST_HELPER_O := $(TEST_HELPER_C:%.c=$(BUILD)/obj/%.o)

.PHONY: all deps run test test-gpu test-systemd fuzz fuzz-build bench-ipc format clean progs tests install install-files install-activate uninstall
# Keep object files of tests and programs (make would delete them as intermediates).
.SECONDARY:
all: progs tests libprojd
progs: $(PROGS)
tests: $(TESTS)

# ---- dependencies ----------------------------------------------------------
# Every compile waits for this stamp, so a fresh machine installs what it lacks
# (as root) or is told the exact apt-get command before anything fails.
DEPS_STAMP := $(BUILD)/.deps-ok
$(DEPS_STAMP): deploy/install-deps.sh
	@mkdir -p $(@D)
	@deploy/install-deps.sh
	@touch $@
deps: $(DEPS_STAMP)

# ---- compile ---------------------------------------------------------------
$(BUILD)/gen/default_config.c: config/default.json
	@mkdir -p $(@D)
	@{ echo '/* generated from config/default.json by make; do not edit */'; \
	   echo 'const char pj_config_default_json[] ='; \
	   sed 's/\\/\\\\/g; s/"/\\"/g; s/^/"/; s/$$/\\n"/' $<; echo ';'; } >$@

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c $(FLAGS_STAMP) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -Wno-missing-prototypes -c $< -o $@

$(BUILD)/obj/%.o: %.c $(FLAGS_STAMP) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu $(FLAGS_STAMP) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(NVCC) $(filter-out -D_GNU_SOURCE,$(CPPFLAGS)) $(NVCCFLAGS) -MMD -MP -c $< -o $@

# The archives are made again when their list of objects changes: a source
# removed or renamed made no object newer, and its old object stayed in the
# archive, so a call left to it linked here and failed on a clean clone.
OBJS_STAMP := $(BUILD)/.objs
OBJS_NOW := $(sort $(CORE_O) $(CUDA_O))
ifeq ($(findstring n,$(firstword -$(MAKEFLAGS))),)
ifneq ($(filter-out $(NO_COMPILE_GOALS),$(or $(MAKECMDGOALS),all)),)
$(shell [ ! -d $(BUILD) ] || [ "$$(cat $(OBJS_STAMP) 2>/dev/null)" = '$(OBJS_NOW)' ] || \
        printf '%s\n' '$(OBJS_NOW)' >$(OBJS_STAMP))
endif
endif
$(OBJS_STAMP):
	@mkdir -p $(@D)
	@printf '%s\n' '$(OBJS_NOW)' >$@

$(CORE_LIB): $(CORE_O) $(OBJS_STAMP)
	@mkdir -p $(@D)
	@rm -f $@
	ar rcs $@ $(CORE_O)

$(CUDA_LIB): $(CUDA_O) $(OBJS_STAMP)
	@mkdir -p $(@D)
	@rm -f $@
	ar rcs $@ $(CUDA_O)

# libprojd: the client library on its own, for programs outside this tree
# (and ctypes): only the protocol and the client, linked against nng.
LIBPROJD_O := $(BUILD)/obj/client/libprojd.o $(BUILD)/obj/client/shmbuf.o $(BUILD)/obj/protocol/ring.o \
              $(BUILD)/obj/protocol/wire.o $(BUILD)/obj/protocol/sockpath.o
.PHONY: libprojd
libprojd: $(BUILD)/lib/libprojd.so $(BUILD)/lib/libprojd.so.1 $(BUILD)/lib/libprojd.a
$(BUILD)/lib/libprojd.so: $(LIBPROJD_O) client/libprojd.map
	@mkdir -p $(@D)
	$(CC) -shared $(LDFLAGS) -Wl,-soname,libprojd.so.1 -Wl,--version-script=client/libprojd.map \
		$(LIBPROJD_O) -lnng -lrt -o $@
# A program linked with -L$(BUILD)/lib asks the loader for the soname.
$(BUILD)/lib/libprojd.so.1: $(BUILD)/lib/libprojd.so
	ln -sf libprojd.so $@
$(BUILD)/lib/libprojd.a: $(LIBPROJD_O)
	@mkdir -p $(@D)
	@rm -f $@
	ar rcs $@ $^

ifeq ($(CUDA),1)
PROG_DEPS := $(CORE_LIB) $(CUDA_LIB)
else
PROG_DEPS := $(CORE_LIB)
endif

define prog_rule
$(BUILD)/bin/$(call prog_name,$(1)): $(BUILD)/obj/$(1:.c=.o) $(PROG_DEPS)
	@mkdir -p $$(@D)
	$$(CC) $$(LDFLAGS) $$< $(LINK_LIBS) -o $$@
endef
$(foreach m,$(MAIN_C),$(eval $(call prog_rule,$(m))))

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(TEST_HELPER_O) $(CORE_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $< $(TEST_HELPER_O) $(CORE_LIB) $(CHECK_LIBS) $(LIBS) -o $@

$(BUILD)/tests/gpu/%: $(BUILD)/obj/tests/gpu/%.o $(TEST_HELPER_O) $(PROG_DEPS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $< $(TEST_HELPER_O) $(LINK_LIBS) $(CHECK_LIBS) -o $@

-include $(shell find $(BUILD)/obj $(BUILD)/fuzz/obj -name '*.d' 2>/dev/null)

# ---- run / test ------------------------------------------------------------
run: progs
	@deploy/run-demo.sh $(BUILD)

test: all
	@tests/run-tests.sh $(BUILD)

test-gpu: all $(GPU_TESTS)
	@tests/run-gpu-tests.sh $(BUILD)

# The units under a real systemd (root; not in `test`: it boots an init).
test-systemd: progs
	@tests/systemd/units.sh $(BUILD)

# ---- fuzzing (clang + libFuzzer) -----------------------------------------
FUZZ_SECONDS ?= 20
FUZZ_C := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BUILD := $(BUILD)/fuzz
FUZZ_CORE_O := $(CORE_C:%.c=$(FUZZ_BUILD)/obj/%.o) $(FUZZ_BUILD)/obj/gen/default_config.o
FUZZ_BINS := $(FUZZ_C:tests/fuzz/%.c=$(FUZZ_BUILD)/%)
# With the project's warnings and dependency files, as the main build has:
# without -MMD, a changed header left the fuzz objects built against the old
# one.
FUZZ_CFLAGS := -std=c11 -O1 -g -fsanitize=fuzzer-no-link,address,undefined -pthread $(WARN) \
               -MMD -MP

$(FUZZ_BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	clang $(CPPFLAGS) $(FUZZ_CFLAGS) -Wno-missing-prototypes -c $< -o $@
$(FUZZ_BUILD)/obj/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	clang $(CPPFLAGS) $(FUZZ_CFLAGS) -c $< -o $@
$(FUZZ_BUILD)/%: tests/fuzz/%.c $(FUZZ_CORE_O)
	clang $(CPPFLAGS) -std=c11 -O1 -g -fsanitize=fuzzer,address,undefined -pthread $^ $(LIBS) -o $@

fuzz: $(FUZZ_BINS)
	@tests/fuzz/run-fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)
# The harnesses alone (tests/e2e_fuzz_seeds.sh replays their seeds).
fuzz-build: $(FUZZ_BINS)

bench-ipc: progs
	@bench/bench-ipc.sh $(BUILD)

PREFIX ?= /usr
DESTDIR ?=
UNITDIR ?= /lib/systemd/system
install: progs libprojd
	@$(MAKE) --no-print-directory install-files
	@$(MAKE) --no-print-directory install-activate

# Into the running system (no DESTDIR, as root): make the projd group and
# the directories now, and let systemd see the units, so that
# `systemctl enable --now projd@0` works without a reboot. A package does
# this in its postinst instead.
install-activate:
	@if [ -n "$(DESTDIR)" ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
	    echo "install: not root: run systemd-sysusers, systemd-tmpfiles --create and systemctl daemon-reload as root"; \
	    exit 0; fi; \
	if command -v systemd-sysusers >/dev/null; then \
	    echo "systemd-sysusers $(PREFIX)/lib/sysusers.d/projd.conf"; \
	    systemd-sysusers $(PREFIX)/lib/sysusers.d/projd.conf || exit 1; fi; \
	if command -v systemd-tmpfiles >/dev/null; then \
	    echo "systemd-tmpfiles --create $(PREFIX)/lib/tmpfiles.d/projd.conf"; \
	    systemd-tmpfiles --create $(PREFIX)/lib/tmpfiles.d/projd.conf || exit 1; fi; \
	if [ -d /run/systemd/system ]; then \
	    echo "systemctl daemon-reload"; systemctl daemon-reload || exit 1; fi; \
	if command -v ldconfig >/dev/null; then echo "ldconfig"; ldconfig || exit 1; fi

# What install put there, removed (the same PREFIX, UNITDIR and DESTDIR),
# but /etc/projd/projd.json (the node's configuration, perhaps edited) and
# /var/lib/projd (its model). Into the running system as root, the
# instances and the MPS unit are stopped and disabled first, and systemd
# and the loader's cache reloaded after.
INSTALLED_PROGS = $(notdir $(PROGS)) projd-bench
uninstall:
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && [ -d /run/systemd/system ]; then \
	    for u in $$(systemctl list-units --all --plain --no-legend 'projd-metrics@*.timer' \
	                    'projd@*.service' | awk '{print $$1}') \
	             $$(cd /etc/systemd/system && ls -1 -- */projd-metrics@*.timer */projd@*.service \
	                    2>/dev/null | xargs -r -n1 basename) \
	             projd-mps.service; do \
	        echo "systemctl disable --now $$u"; systemctl disable --now "$$u" 2>/dev/null || true; done; fi
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/bin/,$(sort $(INSTALLED_PROGS))) \
	    $(DESTDIR)$(UNITDIR)/projd@.service $(DESTDIR)$(UNITDIR)/projd-mps.service \
	    $(DESTDIR)$(UNITDIR)/projd-metrics@.service $(DESTDIR)$(UNITDIR)/projd-metrics@.timer \
	    $(DESTDIR)$(PREFIX)/lib/sysusers.d/projd.conf $(DESTDIR)$(PREFIX)/lib/tmpfiles.d/projd.conf \
	    $(DESTDIR)$(PREFIX)/lib/libprojd.so $(DESTDIR)$(PREFIX)/lib/libprojd.so.1 \
	    $(DESTDIR)$(PREFIX)/lib/libprojd.a
	rm -rf $(DESTDIR)$(PREFIX)/include/projd $(DESTDIR)$(PREFIX)/share/projd \
	    $(DESTDIR)$(PREFIX)/share/doc/projd
	@# The metrics timers' last files: left, they would hold projd_up or
	@# stale series for an instance that is gone, and its alerts would fire
	@# for good (the default folder; another one named by a drop-in is the
	@# operator's to clear).
	rm -f $(DESTDIR)/var/lib/prometheus/node-exporter/projd-*.prom
	@if [ -e $(DESTDIR)/etc/projd/projd.json ]; then \
	    echo "uninstall: kept $(DESTDIR)/etc/projd/projd.json (remove it by hand if it is not wanted)"; fi
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ]; then \
	    if [ -d /run/systemd/system ]; then echo "systemctl daemon-reload"; systemctl daemon-reload; fi; \
	    if command -v ldconfig >/dev/null; then echo "ldconfig"; ldconfig; fi; fi

# The copying half of install: builds nothing, and stops if a file it
# copies is missing (tests/e2e_install.sh runs it against a finished
# build, where a rebuild could pick up other flags). The operator's
# documents that deploy/README.md (installed as the doc folder's README.md),
# the units and `projd --help` name go under PREFIX/share/doc/projd with
# their source-tree names (config/CONFIG.md, ...), so those names hold there
# too; projd --help finds them next to PREFIX/bin. What deploy/README.md
# cites as background (the project's README.md, kernels/ZFORMAT.md and
# NOTES.md) it names as the source tree's.
install-files:
	@for f in $(PROGS) $(BUILD)/lib/libprojd.so $(BUILD)/lib/libprojd.a; do \
	    [ -e "$$f" ] || { echo "install: $$f is missing: build it first (make BUILD=$(BUILD))" >&2; \
	                      exit 1; }; done
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/projd/tuning \
	    $(DESTDIR)$(UNITDIR) $(DESTDIR)/etc/projd $(DESTDIR)$(PREFIX)/lib/sysusers.d \
	    $(DESTDIR)$(PREFIX)/lib/tmpfiles.d $(DESTDIR)$(PREFIX)/include/projd
	install -m 0755 $(PROGS) $(DESTDIR)$(PREFIX)/bin/
	for u in projd@.service projd-mps.service projd-metrics@.service projd-metrics@.timer; do \
	    sed 's#/usr/bin/projd #$(PREFIX)/bin/projd #; s#/usr/bin/projctl #$(PREFIX)/bin/projctl #; s#/usr/share/doc/projd/#$(PREFIX)/share/doc/projd/#' deploy/$$u \
	        >$(DESTDIR)$(UNITDIR)/$$u && chmod 0644 $(DESTDIR)$(UNITDIR)/$$u || exit 1; done
	install -D -m 0644 deploy/README.md $(DESTDIR)$(PREFIX)/share/doc/projd/README.md
	for f in config/CONFIG.md daemon/DAEMON.md daemon/CUDA.md protocol/PROTOCOL.md bench/README.md; do \
	    install -D -m 0644 $$f $(DESTDIR)$(PREFIX)/share/doc/projd/$$f || exit 1; done
	install -m 0644 deploy/sysusers.d/projd.conf $(DESTDIR)$(PREFIX)/lib/sysusers.d/projd.conf
	install -m 0644 deploy/tmpfiles.d/projd.conf $(DESTDIR)$(PREFIX)/lib/tmpfiles.d/projd.conf
	install -d $(DESTDIR)$(PREFIX)/include/projd/protocol $(DESTDIR)$(PREFIX)/lib
	install -m 0644 client/projd.h $(DESTDIR)$(PREFIX)/include/projd/
	install -m 0644 protocol/wire.h $(DESTDIR)$(PREFIX)/include/projd/protocol/
	install -m 0644 $(BUILD)/lib/libprojd.a $(DESTDIR)$(PREFIX)/lib/
	install -m 0755 $(BUILD)/lib/libprojd.so $(DESTDIR)$(PREFIX)/lib/libprojd.so.1
	ln -sf libprojd.so.1 $(DESTDIR)$(PREFIX)/lib/libprojd.so
	install -D -m 0644 -t $(DESTDIR)$(PREFIX)/share/projd/python client/python/projd.py client/python/projd_sglang.py \
	    client/python/projd_pack.py
	install -D -m 0644 -t $(DESTDIR)$(PREFIX)/share/projd/prometheus deploy/prometheus/projd-alerts.yml \
	    deploy/prometheus/projd-alerts.test.yml
	[ -z "$$(ls config/tuning/*.json 2>/dev/null)" ] || \
	    install -m 0644 config/tuning/*.json $(DESTDIR)$(PREFIX)/share/projd/tuning/
	[ -e $(DESTDIR)/etc/projd/projd.json ] || \
	    install -m 0644 deploy/projd.json $(DESTDIR)/etc/projd/projd.json

# The project's sources; bench/results holds the probes of past visits as
# they ran, which stay as they were.
format:
	@command -v clang-format >/dev/null || \
	    { echo "make format: clang-format is not installed (apt-get install clang-format)"; exit 1; }
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu' '*.cuh' ':!bench/results')

clean:
	rm -rf $(BUILD)
