"""The rollout engine against its parts, measured in one run (ratios against baselines of the same run).

a) the backend alone: generated tokens/s for B prompts in one batch (TransformersBackend, in-process);
a') its FLOP/s, 2 x parameters x generated tokens/s (prompt tokens and attention not counted), against
   the machine's fp32 matmul at a decode step's shape [B, H] x [H, I] (the model's hidden and MLP
   widths; the [2048, H] x [H, I] figure beside it): the faster of torch.matmul and oneDNN's linear on a
   packed weight, the kernel the backend runs on CPU; with the backend's threads (target >= 0.4);
a'') its FLOP/s against the model's own Linear layers applied as one decode step applies them (weights
   read from memory): the ceiling at this batch; a''') the largest gap between a log-prob the backend
   records and the one a plain fp32 model (torch's kernels, as the learner's) computes for that token;
b) the engine (InferenceActor + Collector actor wired as run.py wires them, B TicTacToe games in flight):
   generated tokens/s, and b/a (target >= 0.85);
c) B games in flight against one game at a time on the same engine: tokens/s ratio (target >= 4);
c') the most c can be on this machine: B x the model's decode step at batch 1 / its step at batch B (at
   a first prompt's length), which c reaches only if every engine step were full and prompts were free;
d) on a backend answering a random legal move at once: engine turns/s against a plain in-process
   TextArena loop with the same move choice (target >= 0.25);
d') `play_game` in-process on that backend, no Ray: turns/s (target >= 5,000);
d'') the engine through Ray against d') (target >= 0.5);
e) the collector's peak RSS with 1,024 games in flight on that backend, its answers delayed 1 s so that
   they stay in flight (target <= 1 GiB).

With --backend vllm: (a), (b) and (c) of the transformers backend and of vLLM's (VLLMBackend, on the CPU
through vLLM's CPU build), rounds of the two interleaved on engines loaded side by side, and each one's
generated tokens/s alone for one batch of 8, 32 and 64 prompts (sampled unseeded, as a run samples);
then a table comparing the two.

This script is the command line; the parts live beside it, one job each: rollout_games.py (the game loops
without the engine), rollout_alone.py (the backend alone and the matmul baselines), rollout_engine.py (the
engine's actors and the measured collector), rollout_measure.py ((a) to (e)), rollout_vllm.py (--backend
vllm's comparison) and rollout_report.py (the tables).

  python benchmarks/rollout.py                    # the embedded smollm2-135m (minutes on a CPU)
  python benchmarks/rollout.py --quick --model D  # tiny sizes, e.g. a tiny random model folder D
  python benchmarks/rollout.py --backend vllm     # transformers against vLLM (./install.sh --vllm)
  python benchmarks/rollout.py --backend vllm --quick  # by default on a tiny random model (hidden 128)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules, also when imported

from rollout_measure import FULL, QUICK, run  # noqa: E402
from rollout_report import print_table  # noqa: E402
from rollout_vllm import BACKENDS, compare, print_comparison  # noqa: E402

from unstable_core.cli.options import add_config_argument  # noqa: E402

TINY_VLLM_HIDDEN = 128  # --backend vllm --quick's tiny model: vLLM's CPU attention needs head_dim >= 32


def main(argv: list[str] | None = None) -> None:
    """Parse the options, measure, print the table(s)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_config_argument(  # the run's settings: their type and check (and --backend's default) from RunConfig
        parser,
        "--model",
        default=None,
        help="alias, hub id or folder (default: smollm2-135m; with --backend vllm --quick, a tiny random "
        f"model of hidden size {TINY_VLLM_HIDDEN})",
    )
    add_config_argument(
        parser,
        "--backend",
        choices=BACKENDS,
        help="vllm: (a)-(c) and tokens/s alone at batch 8, 32, 64 of both backends, and their comparison",
    )
    parser.add_argument("--batch", type=int, default=8, help="B: prompts per batch, games in flight")
    add_config_argument(parser, "--max-tokens", "max_generation_len", default=32, help="new tokens per turn")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    args = parser.parse_args(argv)
    from unstable_core.errors import UnstableError

    if args.batch < 1 or args.max_tokens < 1:
        raise SystemExit("error: --batch and --max-tokens must be >= 1")
    sizes = QUICK if args.quick else FULL
    quick = " (quick)" if args.quick else ""
    with tempfile.TemporaryDirectory(prefix="bench-rollout-model-") as folder:
        try:
            model = args.model or default_model(args.backend, args.quick, folder)
            if args.backend == "transformers":
                rows = run(model, args.batch, args.max_tokens, sizes)
            else:
                contenders = compare(model, args.batch, args.max_tokens, sizes, args.quick)
        except UnstableError as exc:
            raise SystemExit(f"error: {exc}") from None
    name = args.model or (f"a tiny random model (hidden {TINY_VLLM_HIDDEN})" if model == folder else model)
    title = f"{name}, B={args.batch}, {args.max_tokens} tokens/turn{quick}"
    if args.backend == "transformers":
        print_table(rows, f"rollout benchmark: {title}")
        return
    for contender in contenders:
        print_table(contender.rows(args.batch), f"rollout benchmark, {contender.name} backend: {title}")
    print_comparison(contenders, args.batch, f"rollout benchmark, backends compared: {title}")


def default_model(backend: str, quick: bool, folder: str) -> str:
    """The embedded smollm2-135m; for --backend vllm --quick, a tiny random model written to `folder`."""
    if backend == "vllm" and quick:
        from unstable_core.testing import make_tiny_model

        make_tiny_model(folder, hidden_size=TINY_VLLM_HIDDEN)
        return folder
    return "smollm2-135m"


if __name__ == "__main__":
    main()
