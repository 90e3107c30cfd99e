#!/usr/bin/env bash
# Build llama.cpp's own `llama-server` (the peer in make bench-report) from the llama.cpp sources
# bundled in the llama-cpp-python sdist on PyPI (Debian has no llama.cpp package), and cache the
# binary. Idempotent: a second run with the binary in place is a no-op.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() {
    cat <<'EOF'
Usage: scripts/llama_cpp_build.sh [--help]

Downloads the llama-cpp-python sdist (pip download --no-binary llama-cpp-python --no-deps), builds only the
llama-server target with cmake (static, -DGGML_NATIVE=ON; about 12 minutes on 2 cores) in a
temporary folder, and keeps the binary and a VERSION file in the cache folder.
Needs cmake and a C++ compiler (apt-get install -y cmake build-essential).

Environment:
  LLAMA_CPP_CACHE        cache folder                         (default: .cache/llama.cpp)
  LLAMA_CPP_PY_VERSION   llama-cpp-python version ("" newest) (default: 0.3.36)
  PYTHON                 interpreter that runs pip            (default: .venv/bin/python, else python3)
  JOBS                   parallel compile jobs                (default: nproc)
  LLAMA_CPP_CMAKE_ARGS   more cmake arguments, after ours     (default: none), e.g. an AVX2-only peer on a
                         newer CPU: LLAMA_CPP_CACHE=.cache/llama.cpp-avx2 LLAMA_CPP_CMAKE_ARGS="-DGGML_NATIVE=OFF
                         -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
  DRY_RUN=1              print the commands instead of running them

Prints the binary's path last. The report starts it in its default form (weights repacked), e.g.
llama-server -m MODEL.gguf -np 32 -t 2 -c 32768, and with --no-repack only where that form fails
(llama.cpp's AMX repack crashed on Sapphire Rapids; docs/benchmarking.md).
EOF
}

no_arguments "$@"

cd "$repo_root"
cache="${LLAMA_CPP_CACHE:-.cache/llama.cpp}"
version="${LLAMA_CPP_PY_VERSION-0.3.36}"
jobs="${JOBS:-$(nproc)}"
read -r -a extra_cmake_args <<<"${LLAMA_CPP_CMAKE_ARGS:-}"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
    if [[ -x .venv/bin/python ]]; then python=.venv/bin/python; else python=python3; fi
fi
spec="llama-cpp-python"
[[ -n "$version" ]] && spec="llama-cpp-python==$version"
binary="$cache/bin/llama-server"

if [[ -x "$binary" ]] && ! is_dry_run; then
    echo "==> llama-server already built: $binary ($(cat "$cache/VERSION" 2>/dev/null || echo unknown))"
    echo "$binary"
    exit 0
fi

for tool in cmake c++ make; do
    if ! have "$tool"; then
        echo "error: $tool not found: apt-get install -y cmake build-essential" >&2
        exit 1
    fi
done

work="$(mktemp -d "${TMPDIR:-/tmp}/llama-cpp-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "==> [1/3] downloading the $spec sdist"
run_traced "$python" -m pip download --no-binary llama-cpp-python --no-deps --progress-bar on -d "$work" "$spec"
if is_dry_run; then
    src="$work/llama_cpp_python-VERSION/vendor/llama.cpp"
else
    sdist="$(find "$work" -maxdepth 1 -name 'llama_cpp_python-*.tar.gz' | head -n 1)"
    [[ -n "$sdist" ]] || { echo "error: no sdist downloaded into $work" >&2; exit 1; }
    tar -xzf "$sdist" -C "$work"
    src="$(find "$work" -maxdepth 3 -type d -path '*/vendor/llama.cpp' | head -n 1)"
    [[ -n "$src" ]] || { echo "error: no vendor/llama.cpp in $sdist" >&2; exit 1; }
fi

echo "==> [2/3] configuring and building llama-server ($jobs jobs; about 12 minutes on 2 cores)"
run_traced cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON "${extra_cmake_args[@]}"
run_traced cmake --build "$work/build" --target llama-server -j "$jobs"

echo "==> [3/3] caching the binary in $cache"
run_traced mkdir -p "$cache/bin"
run_traced install -m 0755 "$work/build/bin/llama-server" "$binary"
if ! is_dry_run; then
    printf '%s (llama.cpp bundled in %s)\n' "$("$binary" --version 2>&1 | grep -m1 -i version || echo unknown)" \
        "$(basename "$sdist" .tar.gz)" >"$cache/VERSION"
    printf '%s\n' "${LLAMA_CPP_CMAKE_ARGS:-}" >"$cache/CMAKE_ARGS"  # named in the report's settings line
    cat "$cache/VERSION"
fi
echo "$binary"
