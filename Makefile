# The two commands of epjit: `make run` and `make test`. Each installs what is
# missing (scripts/install-deps.sh), configures and builds first.
BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
CTEST_ARGS ?=

.PHONY: run test build configure deps clean sanitize-thread sanitize-address

# The main job: the EP op on 4 host ranks at a scaled-down DeepSeek-V3 shape
# (hidden 7168, top-8, 256 experts), identity-checked, then timed; the kernel
# cache is cold on the first run and warm on the next.
run: build
	$(BUILD_DIR)/bin/epjit-info
	@echo
	$(BUILD_DIR)/bin/epjit-bench --target host --world 4 --hidden 7168 --topk 8 --experts-per-rank 64 \
	  --tokens 1,37,128 --dtype bf16 --combine-mode gather

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) $(CTEST_ARGS)
	$(MAKE) --no-print-directory sanitize-thread sanitize-address
	scripts/python-check.sh $(BUILD_DIR)

# The e2e subset, the communicator and its bootstrap (a service thread,
# forking tests), and the internode transfer watch and watched transport (a
# watcher thread) under a sanitizer (runtime, test and host kernels
# instrumented; kernel source from the regular build's compiler library).
sanitize-thread sanitize-address: sanitize-%: build
	@if [ ! -f $(BUILD_DIR)-$*/build.ninja ]; then \
	  cmake -S . -B $(BUILD_DIR)-$* -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEPJIT_BUILD_COMPILER=OFF \
	    -DEPJIT_SANITIZER=$* -DEPJIT_KERNEL_SOURCE_LIBRARY=$(abspath $(BUILD_DIR))/lib/libepjit_kernel_source.so; \
	fi
	cmake --build $(BUILD_DIR)-$* -j $(JOBS) --target ep_e2e_test ep_transfer_watch_test ep_watched_transport_test comm_test
	ctest --test-dir $(BUILD_DIR)-$* --output-on-failure -j $(JOBS) \
	  -R '^(e2e|comm|ep\.TransferWatch|ep\.WatchedTransport(Test|Exit))\.'

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# Configure once; later builds re-run CMake by themselves when a CMakeLists changes.
configure: deps
	@if [ ! -f $(BUILD_DIR)/build.ninja ]; then \
	  cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE); \
	fi

deps:
	scripts/install-deps.sh

clean:
	rm -rf $(BUILD_DIR) $(BUILD_DIR)-thread $(BUILD_DIR)-address
