# Two commands set up a fresh machine:  `make run` (the main job) and `make test` (the test suite).
# CPU torch is installed first from its pinned version, so no multi-GB CUDA build is pulled: PyPI's Linux
# wheel of torch is the CUDA build, so the CPU build comes from PyTorch's CPU index (TORCH_INDEX; its
# `2.13.0+cpu` is preferred to PyPI's `2.13.0`). TORCH_INDEX= (empty) takes pip's own choice, e.g. from a
# local wheel folder; TORCH_INDEX=https://download.pytorch.org/whl/cu126 a CUDA build.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
STAMP := $(VENV)/.installed

.PHONY: install run lint test bench clean

# The first install takes minutes: each step says what it does, and pip shows its own progress (no -q).
$(STAMP): pyproject.toml
	@echo "[make] 1/4 the virtual environment $(VENV)"
	test -x $(PY) || python3 -m venv $(VENV)
	@echo "[make] 2/4 pip itself"
	$(PIP) install --progress-bar on --upgrade pip
	@echo "[make] 3/4 torch ($(TORCH_SPEC) from $(or $(TORCH_INDEX),pip's indexes)), the largest download"
	$(PIP) install --progress-bar on --no-deps $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) "$(TORCH_SPEC)"
	@echo "[make] 4/4 embinit and its test dependencies (ray, mlflow, fastapi, ..., and torch's own)"
	$(PIP) install --progress-bar on -e ".[test]"
	touch $(STAMP)
	@echo "[make] installed into $(VENV); its commands are in $(VENV)/bin (e.g. $(VENV)/bin/embinit)"

install: $(STAMP)

# The main job: the quickstart study on a local Ray, tracked in ./mlflow.db (see README).
run: $(STAMP)
	RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1 \
	  $(VENV)/bin/embinit run tune_configs/quickstart.yaml

# `ruff check .` with the rules in pyproject.toml; CI runs it before the tests.
lint: $(STAMP)
	$(VENV)/bin/ruff check .

# The files run on $(TEST_WORKERS) workers (pytest-xdist): most slow tests wait on Ray, servers or a timed
# fault rather than compute, so they overlap well even on 2 cores. `--dist loadfile`: each file's tests on one
# worker, in order (tests/conftest.py: the files kept on one worker together, the longest handed out first).
# `make test TEST_WORKERS=0` runs serially.
TEST_WORKERS ?= 3
test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

bench: $(STAMP)
	$(PIP) install -q -e ".[bench]"
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache
