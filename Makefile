# genmesh — the two commands a newcomer needs are `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
MODEL := models/SmolLM2-135M-Instruct.Q4_1.gguf
SERVICES := services/protocol services/engine scripts/bench services/llm-microservice
STAMP := $(VENV)/.installed

.PHONY: help venv model lint test test-only run run-engine bench bench-engine bench-microservice clean

help:
	@echo "make run           set up and start the mesh with the default model"
	@echo "make test          set up, lint (ruff, mypy) and run the test suite"
	@echo "make model         fetch the default model into ./models (once)"
	@echo "make bench-engine  HTTP server vs in-process pipeline throughput"
	@echo "make bench-microservice  32 streams through the microservice vs straight to the engine"

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
	$(BIN)/mypy services/protocol/src services/engine/src scripts/bench/src services/llm-microservice/src

test-only: $(STAMP) model
	$(BIN)/python -m pytest tests

test: lint test-only

run: run-engine

run-engine: $(STAMP) model
	@echo "==> starting the engine on http://127.0.0.1:8008 (model load takes ~10 s; Ctrl-C stops)"
	$(BIN)/genmesh-engine --model $(MODEL) --port 8008

bench: bench-engine

bench-engine: $(STAMP) model
	$(BIN)/python -m genmesh.bench.engine --model $(MODEL)

bench-microservice: $(STAMP) model
	$(BIN)/python -m genmesh.microservice.bench --model $(MODEL)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
