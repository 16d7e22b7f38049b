# kverify: `make demo` (install, then check the embedded examples) and `make test`
# (install, then CTest and pytest). Both work on a fresh Debian machine, with or without a GPU.
PY ?= python3
PIP := $(PY) -m pip
BUILD := build/py

.PHONY: deps install demo test ctest pytest clean

# System packages: a C++ compiler, CMake, Ninja, GoogleTest and nlohmann/json (Debian names).
deps:
	@if ! { [ -f /usr/include/nlohmann/json.hpp ] && [ -d /usr/src/googletest ] && command -v cmake >/dev/null && command -v ninja >/dev/null && command -v g++ >/dev/null; }; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq g++ cmake ninja-build libgtest-dev nlohmann-json3-dev >/dev/null; \
	fi
	@$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q torch==2.13.0
	@$(PIP) install -q "scikit-build-core>=0.10" "nanobind>=2.0" "rich>=13" numpy "matplotlib>=3.6" pytest

# Build the extension (incremental: build/py is kept) and install the package.
install: deps
	@echo "kverify: building the C++ engine and installing the package into $(PY) (pip is quiet; ~10 min the first time on 2 cores, then incremental)"
	$(PIP) install -q --no-build-isolation --no-deps \
	  --config-settings=cmake.define.KVERIFY_BUILD_TESTS=ON .

demo: install
	$(PY) -m kverify demo

ctest: install
	cmake --build $(BUILD)
	ctest --test-dir $(BUILD) --output-on-failure

pytest: install
	$(PY) -m pytest -q tests

test: ctest pytest

clean:
	rm -rf build
