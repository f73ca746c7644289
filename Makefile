# tollgate — the commands in the README.
#   make run     install what running needs, build the binary, serve examples/tiffin.yaml on
#                127.0.0.1:8080 (build/ without tests and benchmarks, unless it has them)
#   make test    install what the tests need, build with ASan+UBSan (clang), run every test
#   make bench   build optimized, run the benchmarks (bench/out/report.md); QUICK=1: short
#   make lint    clang-format check and clang-tidy
#   make demo    build, run the Tiffin fleet demo (demo/out/report.md); SCENARIO=name for one
#   make fuzz    clang++ libFuzzer build in build-fuzz, each target FUZZ_SECONDS (default 60)
JOBS ?= $(shell nproc)
BUILD ?= build
TEST_BUILD ?= build-asan
CMAKE_FLAGS ?=
CONFIG ?= examples/tiffin.yaml

.PHONY: all bootstrap bootstrap-run bootstrap-test full-build-dir build run test test-build bench lint format clean install demo fuzz

all: build

# Everything (benchmarks, demo, lint, fuzzing); `make run` and `make test` install less.
bootstrap:
	@scripts/bootstrap

bootstrap-run:
	@scripts/bootstrap run

bootstrap-test:
	@scripts/bootstrap test

# A build/ that `make run` configured has tests and benchmarks off (it needs no test
# packages); any other target turns them on first.
$(BUILD)/build.ninja:
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null

full-build-dir: $(BUILD)/build.ninja
	@if [ -f $(BUILD)/.run-only ]; then \
	  cmake -S . -B $(BUILD) -DTOLLGATE_BUILD_TESTS=ON -DTOLLGATE_BUILD_BENCH=ON >/dev/null && \
	  rm $(BUILD)/.run-only; \
	fi

build: bootstrap full-build-dir
	@cmake --build $(BUILD) -j $(JOBS)

# Only the binary: the quickest way to a running service.
run: bootstrap-run
	@if [ ! -f $(BUILD)/build.ninja ]; then \
	  cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DTOLLGATE_BUILD_TESTS=OFF -DTOLLGATE_BUILD_BENCH=OFF $(CMAKE_FLAGS) >/dev/null && \
	  touch $(BUILD)/.run-only; \
	fi
	@cmake --build $(BUILD) -j $(JOBS) --target tollgate_cli
	$(BUILD)/tollgate serve --config $(CONFIG)

# The sanitized test tree is compiled by clang (scripts/bootstrap test installs it and its
# sanitizer runtimes), the quicker of the two at it: its compile is most of make test's time on
# a fresh machine (BENCHMARKS.md, "make test itself"). TEST_CC/TEST_CXX choose another
# compiler for a new $(TEST_BUILD).
TEST_CC ?= clang
TEST_CXX ?= clang++
$(TEST_BUILD)/build.ninja:
	@cmake -S . -B $(TEST_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTOLLGATE_SANITIZE=ON \
	  -DTOLLGATE_BUILD_BENCH=OFF -DCMAKE_C_COMPILER=$(TEST_CC) -DCMAKE_CXX_COMPILER=$(TEST_CXX) \
	  $(CMAKE_FLAGS) >/dev/null

test-build: bootstrap-test $(TEST_BUILD)/build.ninja
	@cmake --build $(TEST_BUILD) -j $(JOBS)

test: test-build
	@cd $(TEST_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

bench: build
	@scripts/bench $(BUILD)

demo: build
	@demo/run --build $(BUILD) $(SCENARIO)

fuzz: bootstrap
	@FUZZ_SECONDS=$(or $(FUZZ_SECONDS),60) JOBS=$(JOBS) fuzz/run.sh build-fuzz

lint: bootstrap full-build-dir
	@scripts/lint $(BUILD)

format:
	@git ls-files '*.h' '*.cc' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(TEST_BUILD)
