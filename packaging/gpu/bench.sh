#!/usr/bin/env bash
# The regime benchmark on an NVIDIA GPU, in one unattended run:
#   packaging/gpu/bench.sh [MODEL.gguf]
# builds llama-cpp-python with CUDA into its own virtual environment
# (.venv-gpu), checks that llama.cpp sees the GPU, and runs
# `gambit-cli bench --regimes` with every layer offloaded. Results land in
# bench-out/gpu/ (regimes.json, regimes.md, regimes.png, run.log); copy the
# table into docs/performance.md with the GPU's name.
#
# Offline machines: set WHEELS to a folder of wheels made beforehand with
#   pip wheel -w wheels -e . && CMAKE_ARGS=-DGGML_CUDA=on pip wheel -w wheels llama-cpp-python==0.3.36
# and pass the model file (default: the embedded SmolLM2, fetched when online).
# Environment: PER_SUITE (prompts per suite, default 3), TARGETS (default
# F32x4,F16x4,F16,F32,Q8_0: the cost-scaled realistic pairs first, then the toy
# ones), DRAFTERS (default draft,lookup,layerskip), MAX_TOKENS (128), PROMPTS (a
# JSON Lines file of prompts instead of the bundled suites). Whether draft model
# + lookup earns its place on documents where reading a batch is cheap:
#   DRAFTERS=draft,lookup,draft+lookup TARGETS=F32x4 PER_SUITE=0 \
#   PROMPTS=resources/prompts/documents.jsonl packaging/gpu/bench.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=bench-out/gpu
mkdir -p "$out"
exec > >(tee "$out/run.log") 2>&1

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv

python3 -m venv .venv-gpu
. .venv-gpu/bin/activate
pip_args=(-q)
if [ -n "${WHEELS:-}" ]; then
    pip_args+=(--no-index --find-links "$WHEELS")
fi
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_CUDA=on}" FORCE_CMAKE=1
echo "building llama-cpp-python with $CMAKE_ARGS (several minutes)..."
pip install "${pip_args[@]}" --no-binary llama-cpp-python -e .

python - <<'PY'
from gambit.engine.machine.backend import detect_backend
backend = detect_backend()
if not backend.devices:
    raise SystemExit("llama.cpp sees no GPU here: check CMAKE_ARGS, CUDA and the driver")
print("GPU offload:", ", ".join(backend.devices))
PY

export GAMBIT_HOME="${GAMBIT_HOME:-$PWD/$out/home}"
model_args=()
if [ -n "${1:-}" ]; then
    model_args=(--target "$1")
fi
if [ -n "${PROMPTS:-}" ]; then
    model_args+=(--prompts "$PROMPTS")
fi
gambit-cli bench --regimes "${model_args[@]}" --gpu-layers -1 \
    --threads "$(nproc)" \
    --per-suite "${PER_SUITE:-3}" --max-tokens "${MAX_TOKENS:-128}" \
    --targets "${TARGETS:-F32x4,F16x4,F16,F32,Q8_0}" --drafters "${DRAFTERS:-draft,lookup,layerskip}" \
    --out "$out"
