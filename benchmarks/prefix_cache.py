"""The transformers backend's prefix cache on and off, on the prompts of a real run (ratio in one run).

Takes the training turns of RUN_DIR's `games/games.jsonl` in a shuffled order, so that a batch mixes seats
and turns as a run's batches do, and generates them in batches of B with the run's sampling (temperature
1, `--max-tokens` tokens), first with the prefix cache off and then on, `--rounds` times each, alternating.
Prints requests/s of both, their ratio and the share of prompt tokens whose keys and values came from
the cache.

  python benchmarks/prefix_cache.py runs/<name>            # a finished `unstable run` of the default
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from unstable_core.cli.options import add_config_argument


def training_prompts(run_dir: Path, seed: int = 0) -> list[tuple[int, ...]]:
    """The prompt ids of every training turn of the run, shuffled."""
    prompts = []
    with open(run_dir / "games" / "games.jsonl") as lines:
        for line in lines:
            game = json.loads(line)
            if game["info"]["eval"]:
                continue
            for trajectory in game["trajectories"]:
                prompts += [tuple(s["prompt_ids"]) for s in trajectory["steps"] if s["prompt_ids"]]
    random.Random(seed).shuffle(prompts)
    return prompts


def requests_per_s(model: str, prompts: list, batch: int, batches: int, max_tokens: int, cache: int) -> tuple:
    """(requests/s, share of prompt tokens reused) of `batches` batches after one warm-up batch."""
    from unstable_core.inference.base import GenerationRequest, SamplingParams
    from unstable_core.inference.hf.backend import TransformersBackend

    backend = TransformersBackend(model, prefix_cache_tokens=cache)
    params = SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=1)

    def run(chunk: list) -> None:
        backend.generate_batch([GenerationRequest(p, params=params) for p in chunk])

    run(prompts[:batch])  # warm-up: the first batch also fills the cache, as a run's first turns do
    looked_up, reused = backend.prefix_cache.prompt_tokens, backend.prefix_cache.reused_tokens
    started = time.perf_counter()
    for k in range(1, batches + 1):
        run(prompts[k * batch : (k + 1) * batch])
    rate = batches * batch / (time.perf_counter() - started)
    looked_up = backend.prefix_cache.prompt_tokens - looked_up
    return rate, (backend.prefix_cache.reused_tokens - reused) / looked_up if looked_up else 0.0


def main(argv: list[str] | None = None) -> None:
    """Parse the options, measure, print."""
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", type=Path, help="a finished run's directory")
    add_config_argument(parser, "--model", help="the run's model (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=8, help="prompts per batch")
    parser.add_argument("--batches", type=int, default=12, help="timed batches per measurement")
    add_config_argument(parser, "--max-tokens", "max_generation_len")  # the run's default
    parser.add_argument("--rounds", type=int, default=2, help="measurements with the cache off and on each")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the inference actor's)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    prompts = training_prompts(args.run_dir)
    if len(prompts) < (args.batches + 1) * args.batch:
        raise SystemExit(f"Error: {args.run_dir} has {len(prompts)} training turns; lower --batches")
    off, on, shares = [], [], []
    for _ in range(args.rounds):
        off.append(requests_per_s(args.model, prompts, args.batch, args.batches, args.max_tokens, 0)[0])
        rate, share = requests_per_s(args.model, prompts, args.batch, args.batches, args.max_tokens, 4096)
        on.append(rate)
        shares.append(share)
    med = statistics.median
    print(
        f"{len(prompts)} training prompts, batches of {args.batch}, {args.max_tokens} tokens, {args.threads} thread(s)"
    )
    print(f"prefix cache off: {med(off):.2f} requests/s ({', '.join(f'{x:.2f}' for x in off)})")
    print(f"prefix cache on:  {med(on):.2f} requests/s ({', '.join(f'{x:.2f}' for x in on)})")
    print(f"on / off: {med(on) / med(off):.2f} x; prompt tokens reused: {med(shares):.0%}")


if __name__ == "__main__":
    main()
