# deepinfer entry points. `make run` and `make test` work on a fresh Debian 12 machine as root.
BUILD_DIR ?= build
SANITIZE_DIR ?= build-sanitize
BUILD_TYPE ?= Release
CLI := $(BUILD_DIR)/bin/deepinfer
JOBS ?= $(shell nproc)

.PHONY: all deps build python run test test-sanitize bench plots clean

all: build

deps:
	tools/install_deps.sh

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

build: $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The Python package in $(BUILD_DIR)/python: PYTHONPATH=$(BUILD_DIR)/python python3 -c 'import deepinfer'
python: deps $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS) --target deepinfer_python

test: deps build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

# The CPU tests under AddressSanitizer + UndefinedBehaviorSanitizer (with LeakSanitizer) in their own
# build: every report fails its test. No CUDA (device code cannot be instrumented), no fuzzers
# (make test runs them, sanitized already), no benchmarks beyond the model tool the server tests need.
SANITIZER_ENV := ASAN_OPTIONS=halt_on_error=1:detect_leaks=1 \
                 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

$(SANITIZE_DIR)/build.ninja:
	cmake -S . -B $(SANITIZE_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DDEEPINFER_SANITIZE=ON \
	      -DDEEPINFER_CUDA=OFF -DDEEPINFER_FUZZ=OFF

# SANITIZE_SUITES=all: every CPU test. A list of test folders (CI: the parsers of untrusted input,
# the grammar compilers and the layers below them, which build without the model, kernels and
# server) builds and runs only those, less their tests of the deepinfer CLI (Cli*), which needs the
# whole build.
SANITIZE_SUITES ?= all
SANITIZE_TARGETS := $(if $(filter all,$(SANITIZE_SUITES)),all deepinfer-make-random-model,$(addprefix test_,$(SANITIZE_SUITES)))
SANITIZE_FILTER := $(if $(filter all,$(SANITIZE_SUITES)),-LE bench,-L '^($(subst $(eval) ,|,$(strip $(SANITIZE_SUITES))))$$' -E '^Cli')

test-sanitize: deps $(SANITIZE_DIR)/build.ninja
	cmake --build $(SANITIZE_DIR) -j $(JOBS) --target $(SANITIZE_TARGETS)
	$(SANITIZER_ENV) ctest --test-dir $(SANITIZE_DIR) --output-on-failure -j $(JOBS) $(SANITIZE_FILTER)

run: deps build
	tools/run_demo.sh $(CLI)

bench: deps build
	bench/run_bench.sh $(BUILD_DIR)

# The charts at the top of docs/benchmarks.md (docs/bench/plots/*.svg), from the JSON in docs/bench.
plots: deps
	node tools/plots/render_benchmarks.mjs

clean:
	rm -rf $(BUILD_DIR) $(SANITIZE_DIR)
