# corral: the two commands of the README, and the targets behind them.
#   make demo    build, then show what corral sees on this and fixture machines
#   make check   every test: unit, CLI, sanitizers (ASan+UBSan), a short fuzz run
#   make mutate  the curated mutations (tests/mutations/mutations.tsv): slow, not in check
#   make check-repeat   the cluster tests RUNS times (default 20) with every core busy
#   make install [PREFIX=/usr/local] [DESTDIR=] [PYTHON=python3]
#                the binaries, libcorral with corral.pc, the headers and the Python
#                package (docs/install.md)
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 10
CMAKE_FLAGS ?=
MAKEFLAGS += --no-print-directory

RUNS ?= 20
PREFIX ?= /usr/local
DESTDIR ?=
PYTHON ?= python3

.PHONY: all deps build check check-repeat test asan fuzz fuzz-long demo bench clean format mutate install

all: build

deps:
	@scripts/deps.sh

build: deps
	cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null
	cmake --build build -j $(JOBS)

test: build
	ctest --test-dir build --output-on-failure -j $(JOBS)

asan: deps
	cmake -S . -B build-asan -DCORRAL_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug $(CMAKE_FLAGS) >/dev/null
	cmake --build build-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir build-asan --output-on-failure -j $(JOBS)

fuzz: deps
	CC=clang cmake -S . -B build-fuzz -DCORRAL_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
	cmake --build build-fuzz -j $(JOBS)
	scripts/fuzz.sh build-fuzz $(FUZZ_SECONDS)

fuzz-long:
	$(MAKE) fuzz FUZZ_SECONDS=600

check: test asan fuzz

# MUTATE_FLAGS: e.g. --only ID,ID or --check (docs/testing.md)
mutate: build
	scripts/mutate.py --build build --jobs $(JOBS) $(MUTATE_FLAGS)

check-repeat: build
	scripts/check-repeat.sh $(RUNS) build '^cluster_'

# DESTDIR is cmake's too: every file goes to $(DESTDIR)$(PREFIX)/...
install: build
	cmake -S . -B build -DCORRAL_PYTHON="$(PYTHON)" >/dev/null
	DESTDIR="$(DESTDIR)" cmake --install build --prefix "$(PREFIX)"

demo: build
	scripts/demo.sh

bench: build
	@for b in bench/*/; do n=$$(basename $$b); $(MAKE) --no-print-directory bench-$$n || exit 1; done

bench-%: build
	bench/$*/run.sh

valgrind: build
	scripts/valgrind.sh

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-asan build-fuzz
