# pdkv: one non-recursive Makefile. `make help` lists the targets.
#
# Variants build into separate folders so objects never mix:
#   make            -> build/release
#   make SAN=asan   -> build/asan   (ASan + UBSan)
#   make SAN=tsan   -> build/tsan   (TSan, threaded tests)

SAN     ?=
PREFIX  ?= /usr/local
DESTDIR ?=
CC      ?= cc
LOOPS   ?= 1

ifeq ($(SAN),)
  VARIANT := release
  SANFLAGS :=
  OPT := -O2 -g
else ifeq ($(SAN),asan)
  VARIANT := asan
  SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
  OPT := -O1 -g -DPD_DEBUG
else ifeq ($(SAN),tsan)
  VARIANT := tsan
  SANFLAGS := -fsanitize=thread -fno-omit-frame-pointer
  OPT := -O1 -g
else
  $(error SAN must be empty, asan or tsan)
endif

B := build/$(VARIANT)

# pkg-config modules the build links; Debian packages that provide them
# (and those later parts need) are installed by tools/deps.sh.
PC_MODULES := libxxhash msgpack libbsd libzmq cmocka jansson

# Lazy on purpose: expanded only after the deps stamp has run.
PC_CFLAGS = $(shell pkg-config --cflags $(PC_MODULES))
PC_LIBS_CORE = $(shell pkg-config --libs libxxhash)
PC_LIBS_BROKER = $(shell pkg-config --libs msgpack libbsd libzmq libibverbs librdmacm)
PC_LIBS_TEST = $(shell pkg-config --libs cmocka jansson)
PC_LIBS_TOOLS = $(shell pkg-config --libs msgpack jansson)

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -Wpointer-arith -Wformat=2 -Wvla -Wundef -Wcast-qual -Wwrite-strings \
        -Wmissing-declarations -Wnull-dereference -Wimplicit-fallthrough
ifeq ($(CI),true)
  WARN += -Werror
endif

CPPFLAGS += -D_GNU_SOURCE

# Each folder sees only the headers of the layers below it, so the compiler
# holds the layering: tools -> agent -> shm, broker -> shm; inside broker/,
# engine/ (pure state machines), config/, local/ (loop, attach, agent rings)
# and xport/ (the transports) see none of each other (config/ only the
# transports' ids), ctrl/ sees local/'s loop, and broker/ itself (the daemon
# that wires them) sees them all.
INC_CORE   := -Iinclude -Ishm
INC_XPORT  := $(INC_CORE) -Ibroker/xport
BROKER_DIRS := broker broker/config broker/ctrl broker/engine broker/local broker/xport \
	       broker/xport/tcp broker/xport/shm broker/xport/rdma
# broker/ itself reaches the transports through xport/'s interface only.
INC_BROKER := $(INC_CORE) $(addprefix -I,$(filter-out broker/xport/%,$(BROKER_DIRS)))
INC_ALL    := $(INC_CORE) $(addprefix -I,$(BROKER_DIRS)) -Iagent -Itests/support \
	      -Itools/pdctl -Itools/pdbench
INC = $(INC_ALL)
$(B)/shm/%.o:              INC = $(INC_CORE)
$(B)/agent/%.o:            INC = $(INC_CORE) -Iagent
$(B)/broker/%.o:           INC = $(INC_BROKER)
$(B)/broker/engine/%.o:    INC = $(INC_CORE) -Ibroker/engine
$(B)/broker/config/%.o:    INC = $(INC_CORE) -Ibroker/xport -Ibroker/config
$(B)/broker/local/%.o:     INC = $(INC_CORE) -Ibroker/local
$(B)/broker/ctrl/%.o:      INC = $(INC_CORE) -Ibroker/local -Ibroker/ctrl
$(B)/broker/xport/%.o:     INC = $(INC_XPORT)
$(B)/broker/xport/tcp/%.o: INC = $(INC_XPORT) -Ibroker/xport/tcp
$(B)/broker/xport/shm/%.o: INC = $(INC_XPORT) -Ibroker/xport/shm
$(B)/broker/xport/rdma/%.o: INC = $(INC_XPORT) -Ibroker/xport/rdma
$(B)/tools/pdctl/%.o:      INC = $(INC_CORE) -Itools/pdctl
$(B)/tools/pdbench/%.o:    INC = $(INC_CORE) -Iagent -Itools/pdbench
CFLAGS_ALL = -std=c11 $(OPT) -fPIC $(WARN) $(SANFLAGS) $(PC_CFLAGS) $(CFLAGS)
LDFLAGS_ALL = $(SANFLAGS) $(LDFLAGS)
LDLIBS_ALL = $(PC_LIBS_CORE) -lpthread $(LDLIBS)

# ---- sources ---------------------------------------------------------------
CORE_SRC := $(wildcard shm/*.c)
CORE_OBJ := $(CORE_SRC:%.c=$(B)/%.o)
LIBCORE  := $(B)/libpdcore.a

# Broker logic (codec, admission, request engines) as a library, so unit
# tests link exactly what pdbroker links; broker/main.c is the program.
BROKER_SRC := $(filter-out broker/main.c,$(foreach d,$(BROKER_DIRS),$(wildcard $(d)/*.c)))
BROKER_OBJ := $(BROKER_SRC:%.c=$(B)/%.o)
LIBBROKER  := $(B)/libpdbroker.a

AGENT_SRC := $(wildcard agent/*.c)
AGENT_OBJ := $(AGENT_SRC:%.c=$(B)/%.o)
LIBAGENT  := $(B)/libpdagent.so
LIBAGENT_A := $(B)/libpdagent.a   # the same objects, for tests
AGENT_MAP := agent/libpdagent.map

PDBROKER := $(B)/pdbroker
# Operator tools: one folder of sources per program.
PDCTL_SRC := $(wildcard tools/pdctl/*.c)
PDCTL     := $(B)/pdctl
PDBENCH_SRC := $(wildcard tools/pdbench/*.c)
PDBENCH   := $(B)/pdbench
BINS := $(PDBROKER) $(if $(PDCTL_SRC),$(PDCTL)) $(if $(PDBENCH_SRC),$(PDBENCH))

SUPPORT_SRC := $(wildcard tests/support/*.c)
SUPPORT_OBJ := $(SUPPORT_SRC:%.c=$(B)/%.o)
UNIT_SRC  := $(wildcard tests/unit/test_*.c)
UNIT_BIN  := $(UNIT_SRC:%.c=$(B)/%)
IT_SRC    := $(wildcard tests/integration/it_*.c)
IT_BIN    := $(IT_SRC:%.c=$(B)/%)
TSAN_SRC  := $(wildcard tests/tsan/tsan_*.c)
TSAN_BIN  := $(TSAN_SRC:%.c=$(B)/%)
BENCH_SRC := $(wildcard tests/bench/bench_*.c)
BENCH_BIN := $(BENCH_SRC:%.c=$(B)/%)

HEADERS := $(wildcard include/pdkv/*.h shm/*.h agent/*.h tools/*/*.h) \
	   $(foreach d,$(BROKER_DIRS),$(wildcard $(d)/*.h))
DEPS_STAMP := build/.deps-ok

.PHONY: all test check tsan install clean deps bench check-headers check-symbols help fuzz
# Keep objects of test and bench programs (make treats them as intermediate).
.SECONDARY:
.DEFAULT_GOAL := all

all: $(LIBCORE) $(LIBBROKER) $(LIBAGENT) $(BINS) python

help:
	@echo "make            build libpdcore.a, libpdagent.so and the programs"
	@echo "make demo       the main job: a local 2P1D cluster moving and verifying 200 requests"
	@echo "make demo-llm   a tiny numpy transformer's KV cache moved prefill -> decode (tp 2): tokens identical to one process"
	@echo "make test       install missing deps, build, run every test (N passed, N failed)"
	@echo "make check      the whole test suite under ASan + UBSan (build/asan)"
	@echo "make tsan       threaded tests under TSan (build/tsan)"
	@echo "make test-rdma  the RDMA transport on SoftRoCE in a qemu guest (apt installs qemu and a kernel; skips visibly without)"
	@echo "make test-netfault  loss, rate limit, link down, data-port blackhole, sender host restart between brokers in network namespaces (root; skips visibly without)"
	@echo "make bench      micro-benchmarks (shm core, receiver engine) beside their baselines"
	@echo "make bench-python  the Python binding beside C: per-call cost, worker throughput (BENCH_ARGS=--runs 3)"
	@echo "make compare-peers  pdbench beside iperf3 and UCX, 64K..4M chunks: a table and a chart in $(B)/compare-peers (COMPARE_ARGS=--quick)"
	@echo "make fuzz       the libFuzzer targets ($(FUZZ_TARGETS)) one after another, FUZZ_SECONDS=$(FUZZ_SECONDS) each (clang, build/fuzz)"
	@echo "make fuzz-NAME  one of them (e.g. make fuzz-wire FUZZ_SECONDS=300)"
	@echo "make lint       cppcheck and clang-tidy over shm/ agent/ broker/ tools/ (known findings: tools/lint-suppress.txt)"
	@echo "make deps       install the Debian packages pdkv needs (root), or print the command"
	@echo "make python     the Python binding into $(B)/python (PYTHONPATH=$(B)/python)"
	@echo "make install    PREFIX=$(PREFIX) DESTDIR=: programs, libpdagent.so, headers, pdkv.pc, the pdkv Python package"
	@echo "make clean      remove build/"
	@echo "options: SAN=asan|tsan, LOOPS=N (repeat the test run), CI=true (-Werror)"

# ---- dependencies ----------------------------------------------------------
deps:
	@tools/deps.sh install

# Runs tools/deps.sh install when a package it names is missing.
$(DEPS_STAMP): tools/deps.sh
	@mkdir -p $(@D)
	@tools/deps.sh check >/dev/null 2>&1 || tools/deps.sh install || true
	@pkg-config --exists $(PC_MODULES) || { echo "missing: $(PC_MODULES)"; exit 1; }
	@touch $@

# ---- build rules -----------------------------------------------------------
$(B)/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(INC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

$(LIBCORE): $(CORE_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(LIBBROKER): $(BROKER_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(PDBROKER): $(B)/broker/main.o $(LIBBROKER) $(LIBCORE)
	$(CC) -o $@ $< $(LIBBROKER) $(LIBCORE) $(LDFLAGS_ALL) $(PC_LIBS_BROKER) $(LDLIBS_ALL)

# The tools link what they use: the core (and pdbench the agent library),
# never the broker's.
$(PDCTL): $(PDCTL_SRC:%.c=$(B)/%.o) $(LIBCORE)
	$(CC) -o $@ $(filter %.o,$^) $(LIBCORE) $(LDFLAGS_ALL) $(PC_LIBS_TOOLS) $(LDLIBS_ALL)

# pdbench spawns pdbroker (found beside itself) and forks agent processes.
$(PDBENCH): $(PDBENCH_SRC:%.c=$(B)/%.o) $(LIBAGENT_A) $(LIBCORE) | $(PDBROKER)
	$(CC) -o $@ $(filter %.o,$^) $(LIBAGENT_A) $(LIBCORE) $(LDFLAGS_ALL) \
		$(PC_LIBS_TOOLS) $(LDLIBS_ALL) -lm

$(LIBAGENT_A): $(AGENT_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(LIBAGENT): $(AGENT_OBJ) $(LIBCORE) $(AGENT_MAP)
	$(CC) -shared -o $@ -Wl,--version-script=$(AGENT_MAP) -Wl,-soname,libpdagent.so.0 \
		$(AGENT_OBJ) -Wl,--whole-archive $(LIBCORE) -Wl,--no-whole-archive \
		$(LDFLAGS_ALL) $(LDLIBS_ALL)

$(B)/tests/unit/%: $(B)/tests/unit/%.o $(SUPPORT_OBJ) $(LIBAGENT_A) $(LIBBROKER) $(LIBCORE)
	$(CC) -o $@ $< $(SUPPORT_OBJ) $(LIBAGENT_A) $(LIBBROKER) $(LIBCORE) $(LDFLAGS_ALL) $(PC_LIBS_TEST) \
		$(PC_LIBS_BROKER) $(LDLIBS_ALL)

# Integration tests run real pdbroker processes (from this variant's build).
$(SUPPORT_OBJ): CPPFLAGS += -DPD_BUILD_DIR=\"$(B)\"

$(B)/tests/integration/%: $(B)/tests/integration/%.o $(SUPPORT_OBJ) $(LIBAGENT_A) $(LIBBROKER) \
		$(LIBCORE) $(BINS)
	$(CC) -o $@ $< $(SUPPORT_OBJ) $(LIBAGENT_A) $(LIBBROKER) $(LIBCORE) $(LDFLAGS_ALL) \
		$(PC_LIBS_TEST) $(PC_LIBS_BROKER) $(LDLIBS_ALL)

$(B)/tests/tsan/%: $(B)/tests/tsan/%.o $(SUPPORT_OBJ) $(LIBCORE)
	$(CC) -o $@ $< $(SUPPORT_OBJ) $(LIBCORE) $(LDFLAGS_ALL) $(PC_LIBS_TEST) $(LDLIBS_ALL)

$(B)/tests/bench/%: $(B)/tests/bench/%.o $(SUPPORT_OBJ) $(LIBAGENT_A) $(LIBBROKER) $(LIBCORE) \
		$(PDBROKER)
	$(CC) -o $@ $< $(SUPPORT_OBJ) $(LIBAGENT_A) $(LIBBROKER) $(LIBCORE) $(LDFLAGS_ALL) \
		$(PC_LIBS_BROKER) $(LDLIBS_ALL)

# ---- Python binding --------------------------------------------------------
# pdkv for Python: a CPython extension (python/pdkv/*.c) over libpdagent.a,
# so it needs no libpdagent.so at run time, and the package's .py files,
# built into $(B)/python (PYTHONPATH=$(B)/python). Debian's python3 (and
# its python3-dev, python3-numpy, python3-pytest from tools/deps.sh).
PYTHON  ?= $(firstword $(wildcard /usr/bin/python3) python3)
PY_INC   = $(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_paths()['include'])")
PY_EXT   = $(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
PY_VER   = $(shell $(PYTHON) -c "import sys; print('%d.%d' % sys.version_info[:2])")
PY_B    := $(B)/python/pdkv
PY_CSRC := $(wildcard python/pdkv/*.c)
PY_OBJ  := $(PY_CSRC:python/pdkv/%.c=$(B)/pyobj/%.o)
PY_FILES := $(wildcard python/pdkv/*.py python/pdkv/*.pyi python/pdkv/py.typed)
PY_OUT  := $(PY_FILES:python/pdkv/%=$(PY_B)/%)
PY_SO    = $(PY_B)/_pdkv$(PY_EXT)
# Installed where Debian's python3 looks: /usr/local/lib/pythonX.Y/dist-packages
# for /usr/local, PREFIX/lib/python3/dist-packages otherwise.
PY_DEST  = $(if $(filter /usr/local,$(PREFIX)),$(PREFIX)/lib/python$(PY_VER)/dist-packages,$(PREFIX)/lib/python3/dist-packages)

.PHONY: python python-build
# Skipped, saying so, where Python's headers are missing (a user without
# root on a machine without python3-dev): the C parts do not need them.
# After the libraries: the sub-make would otherwise link them while this
# make is still writing them (-j).
python: $(LIBAGENT_A) $(LIBCORE) | $(DEPS_STAMP)
	@if [ -f "$(PY_INC)/Python.h" ]; then $(MAKE) --no-print-directory python-build; \
	else echo "python: skipped: no $(PY_INC)/Python.h (apt-get install python3-dev)"; fi

python-build: $(PY_OUT) $(PY_B)/.so-ok

# CPython 3.11 takes keyword lists as char *[]: string literals stay char here.
PY_CFLAGS = -isystem $(PY_INC) -fvisibility=hidden -Wno-missing-field-initializers -Wno-write-strings
$(B)/pyobj/%.o: python/pdkv/%.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(INC_CORE) -Iagent $(CFLAGS_ALL) $(PY_CFLAGS) -MMD -MP -c $< -o $@

$(PY_B)/.so-ok: $(PY_OBJ) $(LIBAGENT_A) $(LIBCORE)
	$(CC) -shared -o $(PY_SO) $(PY_OBJ) $(LIBAGENT_A) $(LIBCORE) $(LDFLAGS_ALL) $(LDLIBS_ALL)
	@touch $@

$(PY_B)/%: python/pdkv/%
	@mkdir -p $(@D)
	cp $< $@

# ---- tests -----------------------------------------------------------------
# Every header compiles on its own.
$(B)/headers/%.ok: % | $(DEPS_STAMP)
	@mkdir -p $(@D)
	@printf '#include "%s"\n' $(abspath $<) > $(@:.ok=.c)
	$(CC) $(CPPFLAGS) $(INC_ALL) $(CFLAGS_ALL) -fsyntax-only $(@:.ok=.c) && touch $@

check-headers: $(HEADERS:%=$(B)/headers/%.ok)

# libpdagent.so exports pd_* symbols only, and no library defines another
# global (STYLE: every external name carries the prefix; the "__" ones are
# the sanitizers').
check-symbols: $(LIBAGENT) $(LIBAGENT_A) $(LIBBROKER) $(LIBCORE)
	@bad=$$(nm -D --defined-only $(LIBAGENT) | awk '$$2 ~ /[TDBRVW]/ {print $$3}' | grep -v '^pd_' || true); \
	if [ -n "$$bad" ]; then echo "non-pd_ symbols exported: $$bad"; exit 1; fi; \
	bad=$$(nm --defined-only $(LIBAGENT_A) $(LIBBROKER) $(LIBCORE) 2>/dev/null | \
		awk '$$2 ~ /[TDBRVW]/ {print $$3}' | grep -v '^pd_' | grep -v '^__' | sort -u || true); \
	if [ -n "$$bad" ]; then echo "non-pd_ globals in the libraries: $$bad"; exit 1; fi; \
	echo "check-symbols: libpdagent.so exports, and the libraries define, only pd_* symbols"

# it_metrics scrapes with curl (installed by tools/deps.sh; skipped, saying so, without).
# The Python tests run on the release build only (a sanitizer build's
# extension cannot load into an interpreter built without it).
PY_TEST := $(if $(SAN),,tests/python/pytest.sh)
test: check-headers check-symbols $(UNIT_BIN) $(IT_BIN) $(if $(SAN),,python)
	@command -v curl >/dev/null 2>&1 || tools/deps.sh install || true
	@PD_TEST_LOOPS=$(LOOPS) PD_BUILD_DIR=$(abspath $(B)) PD_PYTHON=$(PYTHON) \
		tests/run.sh $(UNIT_BIN) $(IT_BIN) $(PY_TEST)

check:
	@$(MAKE) --no-print-directory SAN=asan test

tsan:
	@$(MAKE) --no-print-directory SAN=tsan tsan-run

.PHONY: tsan-run
# Threaded unit tests that also run under TSan (the data plane's threads).
TSAN_UNIT := $(B)/tests/unit/test_tcp $(B)/tests/unit/test_tcp_data $(B)/tests/unit/test_rdma $(B)/tests/unit/test_rdma_fail $(B)/tests/unit/test_rdma_conn

tsan-run: $(TSAN_BIN) $(TSAN_UNIT)
	@TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" PD_TEST_LOOPS=$(LOOPS) \
		tests/run.sh $(TSAN_BIN) $(TSAN_UNIT)

bench: $(BENCH_BIN)
	@for b in $(BENCH_BIN); do $$b $(BENCH_ARGS) || exit 1; done

# The Python binding beside C in one run: per-call cost, worker throughput.
.PHONY: bench-python
bench-python: python $(PDBENCH) $(PDBROKER)
	@PD_BUILD_DIR=$(abspath $(B)) $(PYTHON) tests/bench/bench_python.py $(BENCH_ARGS)

# ---- fuzzing ---------------------------------------------------------------
# libFuzzer targets with ASan + UBSan, built by clang into build/fuzz (their
# own variant: objects never mix), run one after another for FUZZ_SECONDS
# each (make fuzz), or one at a time (make fuzz-wire). Each target's seed
# corpus (tests/fuzz/corpus_<name>) is copied to build/fuzz/corpus_<name>
# first, so new inputs are never written into the tree. Any crash, leak,
# timeout or RSS blow-up fails the target.
#   wire   the control plane's wire codec
#   ring   what agents submit through their rings, as the broker takes it
#   admin  admin socket requests, as the broker parses and runs them
#   shm    agent-writable shared memory scribbled between broker steps
# ring, admin and shm run on a broker of pdbroker's own parts
# (tests/fuzz/fuzz_broker.h) with a fake control plane linked in place of
# broker/ctrl/pd_ctrl*.c (tests/fuzz/fuzz_ctrl.c) and a fake transport
# (fuzz_xport.c): no socket to a peer, nothing dialled.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := wire ring admin shm
FUZZ_B       := build/fuzz
FUZZ_SAN     := -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZ_CFLAGS   = -std=c11 -g -O1 -fno-omit-frame-pointer $(FUZZ_SAN) $(WARN) $(PC_CFLAGS)
FUZZ_OPTS    := -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=10 -rss_limit_mb=2048
FUZZ_WIRE_OBJ := $(patsubst %.c,$(FUZZ_B)/%.o,$(wildcard broker/ctrl/pd_wire*.c) shm/pd_err.c \
		 tests/fuzz/fuzz_wire.c)
FUZZ_BROKER_SRC := $(CORE_SRC) $(AGENT_SRC) \
		   $(filter-out $(wildcard broker/ctrl/pd_ctrl*.c),$(BROKER_SRC)) \
		   $(addprefix tests/fuzz/,fuzz_ctrl.c fuzz_xport.c fuzz_broker.c fuzz_play.c)
FUZZ_BROKER_LIB := $(FUZZ_B)/libfuzzbroker.a

$(FUZZ_B)/.clang-ok: | $(DEPS_STAMP)
	@mkdir -p $(@D)
	@command -v $(FUZZ_CC) >/dev/null && [ -n "$$(ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a 2>/dev/null)" ] \
		|| tools/deps.sh install
	@touch $@

$(FUZZ_B)/%.o: %.c | $(FUZZ_B)/.clang-ok
	@mkdir -p $(@D)
	$(FUZZ_CC) $(CPPFLAGS) $(INC_ALL) $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@

$(FUZZ_BROKER_LIB): $(FUZZ_BROKER_SRC:%.c=$(FUZZ_B)/%.o)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_B)/fuzz_wire: $(FUZZ_WIRE_OBJ)
	$(FUZZ_CC) $(FUZZ_SAN) -o $@ $^ $(PC_LIBS_BROKER)

$(FUZZ_B)/fuzz_%: $(FUZZ_B)/tests/fuzz/fuzz_%.o $(FUZZ_BROKER_LIB)
	$(FUZZ_CC) $(FUZZ_SAN) -o $@ $^ $(PC_LIBS_BROKER) $(PC_LIBS_CORE) -lpthread

.PHONY: $(FUZZ_TARGETS:%=fuzz-%)
$(FUZZ_TARGETS:%=fuzz-%): fuzz-%: $(FUZZ_B)/fuzz_%
	rm -rf $(FUZZ_B)/corpus_$* && mkdir -p $(FUZZ_B)/corpus_$*
	cp tests/fuzz/corpus_$*/* $(FUZZ_B)/corpus_$*/
	$(FUZZ_B)/fuzz_$* $(FUZZ_OPTS) -artifact_prefix=$(FUZZ_B)/$*- $(FUZZ_B)/corpus_$*

# One after another, whatever -j says: the total time is FUZZ_SECONDS per target.
fuzz: $(FUZZ_TARGETS:%=$(FUZZ_B)/fuzz_%)
	@for t in $(FUZZ_TARGETS); do $(MAKE) --no-print-directory fuzz-$$t || exit 1; done

# ---- static analysis -------------------------------------------------------
# cppcheck and clang-tidy (Debian 12's: 2.10 and 14) over the C sources of
# shm/, agent/, broker/ (every folder) and tools/, with the build's defines
# and INC_ALL (every folder's headers: the build itself holds the layering).
# The checks are STYLE's:
#   cppcheck --enable=warning,portability --error-exitcode=1, with posix.cfg,
#     except readdirCalled (everywhere): it wants readdir_r, which glibc
#     deprecates (2.24) and POSIX.1-2024 marks obsolescent; readdir on a
#     stream that one thread reads is safe.
#   clang-tidy cert-err33-c and bugprone-unused-return-value, in the .c files
#     and the project's headers: a result is checked or cast to void.
# Any finding fails, except those tools/lint-suppress.txt lists one by one
# (files under restructuring, until fixed there); tools/lint.sh runs both,
# LINT_JOBS files at a time. Results in $(B)/lint.
LINT_SRC := $(sort $(wildcard shm/*.c agent/*.c) $(shell find broker tools -name '*.c'))
LINT_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
LINT_CPPCHECK := --std=c11 --library=posix --enable=warning,portability --error-exitcode=1 \
		 --suppress=readdirCalled
LINT_TIDY := --checks=-*,cert-err33-c,bugprone-unused-return-value \
	     --header-filter=^(include|shm|agent|broker|tools)/
.PHONY: lint

lint: | $(DEPS_STAMP)
	@command -v cppcheck >/dev/null && command -v clang-tidy >/dev/null || tools/deps.sh install
	@CC="$(CC)" tools/lint.sh --out $(B)/lint --suppress tools/lint-suppress.txt --jobs $(LINT_JOBS) \
		--cppcheck "$(LINT_CPPCHECK)" --tidy "$(LINT_TIDY)" \
		--cflags "-std=c11 $(CPPFLAGS) $(INC_ALL) $(PC_CFLAGS)" $(LINT_SRC)

# ---- install ---------------------------------------------------------------
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig \
		$(DESTDIR)$(PREFIX)/include/pdkv
	$(if $(BINS),install -m 0755 $(BINS) $(DESTDIR)$(PREFIX)/bin)
	install -m 0755 $(LIBAGENT) $(DESTDIR)$(PREFIX)/lib/libpdagent.so.0
	ln -sf libpdagent.so.0 $(DESTDIR)$(PREFIX)/lib/libpdagent.so
	install -m 0644 include/pdkv/*.h $(DESTDIR)$(PREFIX)/include/pdkv/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(shell sed -n 's/^#define PD_VERSION_STRING "\(.*\)"/\1/p' include/pdkv/version.h)|' \
		agent/pdkv.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/pdkv.pc
	@tools/install-ldconfig.sh "$(DESTDIR)" "$(PREFIX)/lib"
	install -d $(DESTDIR)$(PY_DEST)/pdkv
	install -m 0644 $(PY_FILES) $(DESTDIR)$(PY_DEST)/pdkv/
	install -m 0755 $(PY_SO) $(DESTDIR)$(PY_DEST)/pdkv/

clean:
	rm -rf build

-include $(shell find $(B) $(FUZZ_B) -name '*.d' 2>/dev/null)

# The main job: a local 2P1D cluster over TCP, 200 requests of chunked
# prefill (16 chunks in batches of 4) with 8 in flight against a receive
# pool of 64 slots, so admission has to queue; each prefill rank stages in
# a send pool of its own (64 slots); every byte is verified.
DEMO_ARGS ?= --local --prefill 2 --decode 1 --tp 2 --transport tcp --requests 200 \
	     --concurrency 8 --chunks 16 --batch 4 --slot-size 256K --recv-slots 64 \
	     --send-slots 128 --send-pools 2 --abort-rate 0.05 --seed 1 --engine step
.PHONY: demo demo-llm compare-peers
demo: all
	@echo "make demo: pdbench $(DEMO_ARGS)"
	@$(PDBENCH) $(DEMO_ARGS)

# A tiny numpy transformer served disaggregated: prefill and decode rank
# processes (tensor parallelism 2) move its real KV cache through pdkv.kv,
# and the tokens must equal a single-process run's, bit for bit.
DEMO_LLM_ARGS ?= --tp 2
demo-llm: all
	@test -f $(PY_B)/kv.py || { echo "demo-llm: the Python binding was not built (python3-dev)"; exit 1; }
	@echo "make demo-llm: examples/llm/demo.py $(DEMO_LLM_ARGS)"
	@PYTHONPATH=$(abspath $(B))/python $(PYTHON) examples/llm/demo.py $(DEMO_LLM_ARGS)

# pdkv beside iperf3 and UCX, chunk size by chunk size, a table and a chart
# into $(B)/compare-peers (tools/compare-peers.sh --help; it installs
# iperf3, ucx-utils and gnuplot-nox as root, not tools/deps.sh).
compare-peers: all $(B)/tests/bench/bench_e2e $(B)/tests/bench/bench_shmx
	@B=$(abspath $(B)) tools/compare-peers.sh $(COMPARE_ARGS)

# ---- RDMA transport on real verbs (SoftRoCE in a qemu guest) ---------------
# tests/rdma/run.sh boots Debian's kernel with rdma_rxe (fetching what it
# needs with apt), runs the programs on two rxe devices across a veth pair
# and prints "N passed, N failed, N skipped"; it skips visibly (exit 0)
# when qemu or the kernel package cannot be had.
RDMA_TEST_SRC := $(wildcard tests/rdma/*.c)
RDMA_TEST_BIN := $(RDMA_TEST_SRC:%.c=$(B)/%)
RDMA_TIMEOUT  ?= 600
.PHONY: test-rdma

$(B)/tests/rdma/%: $(B)/tests/rdma/%.o $(LIBBROKER) $(LIBCORE)
	$(CC) -o $@ $< $(LIBBROKER) $(LIBCORE) $(LDFLAGS_ALL) $(PC_LIBS_BROKER) $(LDLIBS_ALL)

# Third command: pdbench, 2 TP ranks per broker, over rdma between the two
# rxe addresses, in the step engine (one scheduler thread per rank) with
# fewer receive slots than the requests in flight need, so admission
# queues; its figures are functional only (emulated RDMA).
RDMA_PDBENCH := pdbench --local --transport rdma --prefill-host $$RXE_IP1 --decode-host \
	$$RXE_IP0 --tp 2 --requests 40 --concurrency 4 --chunks 8 --abort-rate 0.1 \
	--slot-size 64K --recv-slots 32 --send-slots 16 --engine step --quiet

# Fourth: perftest's ib_write_lat/ib_write_bw as the same-boot baselines
# (Debian's perftest, installed when root; a SKIP line when missing).
RDMA_BASELINE_BIN = --bin tests/rdma/rdma_baseline.sh \
	$$(for t in ib_write_lat ib_write_bw; do p=$$(command -v $$t) && echo --bin $$p; done)

test-rdma: $(RDMA_TEST_BIN) $(PDBROKER) $(PDBENCH)
	@command -v ib_write_lat >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || \
		apt-get install -y -q --no-install-recommends perftest >/dev/null 2>&1 || true
	@tests/rdma/run.sh --timeout $(RDMA_TIMEOUT) \
		$(addprefix --bin ,$(RDMA_TEST_BIN) $(PDBROKER) $(PDBENCH)) $(RDMA_BASELINE_BIN) -- \
		'rdma_xport_test $$RXE_IP0 $$RXE_IP1' \
		'PD_TEST_BIN_DIR=/usr/local/bin rdma_broker_test $$RXE_IP0 $$RXE_IP1' \
		'$(RDMA_PDBENCH) && echo "PASS pdbench-over-rdma" || echo "FAIL pdbench-over-rdma"' \
		'rdma_baseline.sh'

# The two-broker run (pdbroker processes, agents in the test): libpdagent
# and the test support too; in the guest, pd_proc.c finds pdbroker through
# PD_TEST_BIN_DIR (run.sh copies every --bin to /usr/local/bin).
$(B)/tests/rdma/rdma_broker_test: $(B)/tests/rdma/rdma_broker_test.o $(SUPPORT_OBJ) \
		$(LIBAGENT_A) $(LIBBROKER) $(LIBCORE) | $(PDBROKER)
	$(CC) -o $@ $< $(SUPPORT_OBJ) $(LIBAGENT_A) $(LIBBROKER) $(LIBCORE) $(LDFLAGS_ALL) \
		$(PC_LIBS_BROKER) $(LDLIBS_ALL)

# ---- network faults between real brokers (network namespaces) --------------
# tests/netfault/run.sh puts a prefill and a decode broker in network
# namespaces of their own, joined by a veth pair, and while pdbench moves
# and verifies requests it drops packets (nftables), limits the rate (tbf),
# takes the link down, and blackholes the decode broker's data port (6
# runs); "N passed, N failed, N skipped", about 4 minutes. Root (nftables
# is installed with apt when missing); it skips visibly otherwise.
# NETFAULT_ARGS: e.g. --only blackhole --blackhole-runs 10, -v.
NETFAULT_ARGS ?=
.PHONY: test-netfault

test-netfault: $(PDBROKER) $(PDBENCH) $(PDCTL)
	@tests/netfault/run.sh --build $(B) $(NETFAULT_ARGS)
