# deepinfer entry points. `make run` and `make test` work on a fresh Debian 12 machine as root.
BUILD_DIR ?= build
BUILD_TYPE ?= Release
CLI := $(BUILD_DIR)/bin/deepinfer
JOBS ?= $(shell nproc)

.PHONY: all deps build run test bench clean

all: build

deps:
	tools/install_deps.sh

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

build: $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: deps build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

run: deps build
	tools/run_demo.sh $(CLI)

bench: deps build
	bench/run_bench.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)
