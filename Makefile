# Two commands set up a fresh machine:  `make run` (the main job) and `make test` (the test suite).
# CPU torch is installed first from its pinned version, so no multi-GB CUDA build is pulled.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: install run lint test bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

# The main job: the quickstart study on a local Ray, tracked in ./mlflow.db (see README).
run: $(STAMP)
	RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1 \
	  $(VENV)/bin/embinit run tune_configs/quickstart.yaml

# `ruff check .` with the rules in pyproject.toml; CI runs it before the tests.
lint: $(STAMP)
	$(VENV)/bin/ruff check .

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PIP) install -q -e ".[bench]"
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache
