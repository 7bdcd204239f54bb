# The two set-up commands of a fresh machine: `make build` (the kernel for this machine, proven to load
# through `kernels`) and `make test` (every test). Everything else is a thin call into scripts/.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The torch this machine builds against: the CPU wheel by default; a GPU machine passes its own spec.
TORCH_SPEC ?= torch==2.13.0
BUILD_DIR ?= build

# Filters for docker-build (empty means every matrix entry) and the publisher's target.
TORCH ?=
ROCM ?=
BASE_IMAGE ?=
# REQUIRE_ABI=true: docker-build fails an entry whose variant breaks manylinux_2_28/abi3 (releases).
REQUIRE_ABI ?=
REPO ?=
DRY_RUN ?=
# Extra benchmark arguments, e.g. BENCH_ARGS="--threads 1 --shapes all".
BENCH_ARGS ?=

.PHONY: venv system-deps build test lint gate docker-build publish bench clean FORCE

venv: $(VENV)/.installed

# The torch spec the venv is made with. A TORCH_SPEC given on the command line or in the environment
# replaces it when it differs, and the venv is remade with that torch; a plain `make test` keeps the one
# the venv has (the default spec is used only for a new venv).
$(VENV)/.torch-spec: FORCE
	@mkdir -p $(VENV)
	@if [ ! -f $@ ] || [ "$(origin TORCH_SPEC)" != file ]; then \
	  echo '$(TORCH_SPEC)' | cmp -s - $@ || echo '$(TORCH_SPEC)' > $@; fi

$(VENV)/.installed: requirements/build.txt requirements/dev.txt requirements/cuda-headers.txt $(VENV)/.torch-spec
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$$(cat $(VENV)/.torch-spec)" -r requirements/dev.txt
	$(PY) -m pip install --quiet --no-deps -r requirements/cuda-headers.txt
	touch $@

# Debian packages for the gfx942 gate, the emulator, the container tests (needs root).
system-deps:
	bash .ci/system-deps

build: venv
	$(PY) -m scripts.build --out $(BUILD_DIR)

test: build
	$(PY) -m scripts.lint
	$(PY) -m pytest tests/

lint: venv
	$(PY) -m scripts.lint

gate: venv
	$(PY) -m scripts.gfx942_gate

docker-build: venv
	$(PY) -m scripts.docker_build --torch "$(TORCH)" --rocm "$(ROCM)" --base-image "$(BASE_IMAGE)" \
	  $(if $(filter 1 true,$(REQUIRE_ABI)),--require-abi)

publish: venv
	$(PY) -m scripts.publish --build-dir $(BUILD_DIR) $(if $(REPO),--repo $(REPO)) $(if $(DRY_RUN),--dry-run)

bench: build
	$(PY) -m benchmarks.run --build-dir $(BUILD_DIR) $(BENCH_ARGS)

clean:
	rm -rf $(BUILD_DIR)
