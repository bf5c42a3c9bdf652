# mmelocal: every target sets up what it needs in .venv (nothing by hand).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch/torchvision: the newest pair mmelocal is tested with (the extras' upper bounds);
# another pair: make install TORCH_PINS="torch==X torchvision==Y".
TORCH_PINS ?= torch==2.14.1 torchvision==0.29.1
EXTRAS ?= torch,vision,nlp,onnx,gpu,docker,triton,bench,aws,minilm,dev
STAMP := $(VENV)/.installed

MODEL ?= minilm
FORMAT ?= torchscript
REPO ?= model_repository
# WEIGHTS (DEFAULT, none or a weights name) and REVISION (a hub branch, tag or commit) are
# passed to `mmelocal build` only when set: its own defaults apply otherwise
WEIGHTS ?=
REVISION ?=
SITE ?= site
# The suite spends most of its time waiting on Triton loads and timed load tests, not on the
# CPU: three pytest-xdist workers (one test file each at a time, so a module's fixtures and
# servers stay in one process) keep two cores busy, in about 0.78x the time two workers
# take; the longest files go first (tests/conftest.py, tests/durations.json), not xdist's
# order by count. PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 3
PYTEST_ARGS ?= $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder) --durations=15

.PHONY: install test lint typecheck docs pytest repo demo clean bench gpu-proof sdk-venvs

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH_PINS) -e '.[$(EXTRAS)]'
	touch $(STAMP)

lint: install
	$(BIN)/ruff check mmelocal tests benchmarks examples
	$(BIN)/ruff format --check mmelocal tests benchmarks examples

typecheck: install
	$(BIN)/mypy mmelocal benchmarks examples tests

pytest: install sdk-venvs
	MMELOCAL_SDK_VENVS=$(SDK_VENVS) $(BIN)/python -m pytest $(PYTEST_ARGS)

# The SageMaker Python SDK 2.x and 3.x, each in its own virtual environment (they cannot
# share one), for tests/localaws/test_sdk_notebooks.py: built once per machine and per pin
# file (about 20 s and 100 s from pip's cache), outside the test run. If pip cannot reach
# the package index the environment is left out and that test skips, saying why; pip
# gives up at once there (no retries, 15 s per connection), since no stamp is written and
# every run tries again.
SDK_VENVS ?= $(HOME)/.cache/mmelocal/sdk-venvs
SDK_PINS := tests/localaws/sdk
sdk-venvs: $(SDK_VENVS)/sdk2/.installed $(SDK_VENVS)/sdk3/.installed

$(SDK_VENVS)/%/.installed: $(SDK_PINS)/requirements-%.txt
	rm -rf $(SDK_VENVS)/$*
	{ $(PYTHON) -m venv $(SDK_VENVS)/$* && \
		$(SDK_VENVS)/$*/bin/python -m pip install --quiet --retries 0 --timeout 15 -r $< && touch $@; } || \
		{ rm -rf $(SDK_VENVS)/$*; \
		echo "sdk-venvs: could not install $< (is the package index reachable?): its test will skip"; }

# the docs site (MkDocs, Material): a broken link, nav entry or docstring reference fails
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir $(SITE)

test: lint typecheck docs pytest

repo: install
	$(BIN)/mmelocal build $(MODEL) --repo $(REPO) --format $(FORMAT) \
		$(if $(WEIGHTS),--weights $(WEIGHTS)) $(if $(REVISION),--revision $(REVISION))

demo: install
	$(BIN)/mmelocal demo

bench: install
	for f in benchmarks/*.py; do case $$f in */gpu_proof*.py) continue;; esac; \
		$(BIN)/python $$f || exit 1; done

# On a machine with an NVIDIA GPU and a CUDA build of torch: proves the GPU paths
# (benchmarks/gpu_proof.py; WHEELS is a folder of wheels to install first, if any). Without a
# GPU it says so and fails. Not part of `make test` or `make bench`.
GPU_PROOF_OUT ?= gpu-proof-out
WHEELS ?= .whl
GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)
GPU_PROOF_ARGS ?=
gpu-proof:
	$(GPU_PYTHON) benchmarks/gpu_proof.py --wheels $(WHEELS) --out $(GPU_PROOF_OUT) $(GPU_PROOF_ARGS)

clean:
	rm -rf $(VENV) build dist $(SITE) .pytest_cache .mypy_cache .ruff_cache
