"""Can the model learn Kuhn Poker's card-dependent answers at all, and can policy gradient find them?

The strategy recipe's policy stays card-blind (docs/benchmarks.md#strategy). This separates the model from
the signal: no games, no opponent, no noise. Each update sees the 12 first-round information sets once,
rendered exactly as a run renders them (`--template`), with the run's LoRA, and a fixed card-dependent
target: check J and Q first or after a check, bet K; fold J facing a bet, call Q and K (exploitability
0.167). Two signals:

    sft        cross-entropy on the target answer: -log pi(target | s)
    reinforce  an answer sampled from pi renormalised over the two legal ones, reward +1 if it is the
               target and -1 if not: -r log pi(answer | s), the clean, balanced policy-gradient signal;
               with `--explore EPS`, the answer is drawn uniformly from the legal ones with probability EPS
               and trained on as if pi had sampled it (no importance weight: with one, the expected
               gradient would be the unexplored one's); with `--positive-only`, an answer rewarded -1 adds
               nothing (filtered behaviour cloning: rejection-sampling fine-tuning's signal)

Every `--every` updates it prints pi(target | s), renormalised over the legal answers, per information
set (OpenSpiel's key: card 0 J, 1 Q, 2 K, then the history), their mean and the exact exploitability of
the policy (the `kuhn-exploitability` probe, on this model as it is).

    python3 benchmarks/kuhn_capacity.py --mode sft --steps 20
    python3 benchmarks/kuhn_capacity.py --mode reinforce --steps 20
"""

from __future__ import annotations

import argparse
import json
import random
import time
from typing import Any

#: the target answer per OpenSpiel history, for cards J, Q, K
TARGET = {
    "": ("[check]", "[check]", "[bet]"),
    "p": ("[check]", "[check]", "[bet]"),
    "b": ("[fold]", "[call]", "[call]"),
    "pb": ("[fold]", "[call]", "[call]"),
}


def target_of(key: str) -> str:
    """The target answer at an information set `key` (card digit, then the history)."""
    return TARGET[key[1:]][int(key[0])]


def build(model: str, template: str, env_id: str, lr: float) -> dict[str, Any]:
    """The model with a fresh LoRA (the run's default), its optimizer, the probe's policy on it, and per
    information set the prompt ids and each legal answer's completion ids."""
    import torch
    from peft import get_peft_model

    from unstable_core.config import DEFAULT_LORA_CFG
    from unstable_core.games.analysis.kuhn import positions
    from unstable_core.games.analysis.model_policy import ModelPolicy
    from unstable_core.games.templates import answer_prompt
    from unstable_core.learners.lora import make_lora_config, present_target_modules
    from unstable_core.model_loading import load_causal_lm, load_tokenizer

    tokenizer = load_tokenizer(model)
    base = load_causal_lm(model, device="cpu")
    wanted = present_target_modules(base, DEFAULT_LORA_CFG["target_modules"])
    net = get_peft_model(
        base, make_lora_config(DEFAULT_LORA_CFG, wanted)
    )  # the run's LoRA, as the learner builds it
    policy = ModelPolicy(net, tokenizer, answer_prompt(template, tokenizer), label="capacity")
    sets = positions(env_id)
    items = []
    for p in sets:
        text, ids = policy.render(p.observation)
        moves = list(p.answers)
        completions = policy.completions(text, moves)  # one spelling per move: the one TextArena writes
        items.append(
            {"key": p.key, "prompt": list(ids), "answers": dict(zip(moves, completions, strict=True))}
        )
    params = [q for q in net.parameters() if q.requires_grad]
    return {"net": net, "policy": policy, "positions": sets, "items": items,
            "optimizer": torch.optim.AdamW(params, lr=lr, weight_decay=0.0)}  # fmt: skip


def logprob(net: Any, prompt: list[int], completion: list[int]) -> Any:
    """log pi(completion | prompt), summed over its tokens (with the graph, for a gradient)."""
    import torch

    ids = torch.tensor([prompt + completion])
    logits = net(ids).logits[0, len(prompt) - 1 : -1].float().log_softmax(-1)
    return logits.gather(-1, torch.tensor(completion)[:, None]).sum()


def update(
    state: dict[str, Any], mode: str, rng: random.Random, explore: float = 0.0, positive_only: bool = False
) -> None:
    """One update over the 12 information sets (the mean of their losses)."""
    import torch

    net, items = state["net"], state["items"]
    state["optimizer"].zero_grad()
    loss = 0.0
    for item in items:
        target = target_of(item["key"])
        if mode == "sft":
            loss = loss - logprob(net, item["prompt"], item["answers"][target])
            continue
        with torch.no_grad():
            probs = {m: logprob(net, item["prompt"], c).exp().item() for m, c in item["answers"].items()}
        total = sum(probs.values())
        if rng.random() < explore:
            answer = rng.choice(list(probs))
        else:
            answer = rng.choices(list(probs), [v / total for v in probs.values()])[0]
        reward = 1.0 if answer == target else -1.0
        if positive_only and reward < 0:
            continue
        loss = loss - reward * logprob(net, item["prompt"], item["answers"][answer])
    if isinstance(loss, float):  # every answer filtered out: nothing to learn from this update
        return
    (loss / len(items)).backward()
    state["optimizer"].step()


def measure(state: dict[str, Any], env_id: str) -> dict[str, Any]:
    """pi(target | s) renormalised over the legal answers per information set, and the exact exploitability."""
    import torch

    from unstable_core.games.analysis.kuhn import KuhnExploitability

    with torch.no_grad():
        result = KuhnExploitability()(state["policy"], env_id)
    right = {}
    for detail in result.positions:
        probs = detail["probabilities"]
        right[detail["key"]] = probs[target_of(detail["key"])] / max(sum(probs.values()), 1e-12)
    return {"target": right, "mean_target": sum(right.values()) / len(right),
            "exploitability": result.figures["exploitability"].value}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mode", choices=["sft", "reinforce"], required=True)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--template", default="kuhn-compact")
    parser.add_argument("--env", default="KuhnPoker-v0-chips")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument(
        "--explore", type=float, default=0.0, help="reinforce: a uniform legal answer this often"
    )
    parser.add_argument("--positive-only", action="store_true", help="reinforce: train on +1 answers only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the measurements to this file")
    args = parser.parse_args()
    import torch

    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    state = build(args.model, args.template, args.env, args.lr)
    rows = []

    def show(step: int, wall_s: float) -> None:
        row = {"step": step, "wall_s": wall_s, **measure(state, args.env)}
        rows.append(row)
        sets = " ".join(f"{k}:{v:.2f}" for k, v in row["target"].items())
        print(f"update {step:3d}  pi(target) mean {row['mean_target']:.3f}  exploitability "
              f"{row['exploitability']:.3f}  | {sets}", flush=True)  # fmt: skip

    print(
        f"{args.mode}, lr {args.lr}, template {args.template}, {args.model}: pi(target | s) per information set"
    )
    started = time.monotonic()
    show(0, 0.0)
    for step in range(1, args.steps + 1):
        update(state, args.mode, rng, args.explore, args.positive_only)
        if step % args.every == 0 or step == args.steps:
            show(step, time.monotonic() - started)
    print(f"{(time.monotonic() - started) / args.steps:.1f} s per update (measuring included)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
