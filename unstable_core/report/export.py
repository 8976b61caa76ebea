"""A run's trajectories as records for supervised fine-tuning (the command is `unstable export`, in
`cli/export.py`).

Format `chat`: one record per turn, `{"messages": [system/user turns of the prompt, {"role": "assistant",
"content": completion}], "metadata": {...}}`; the messages are read back from the exact prompt the model saw
(ChatML, Gemma and Llama 3 chat formats), and re-rendering them gives that prompt.
Format `raw`: one record per step with token ids, log-probabilities and rewards.

By default only the seats played by the run's own checkpoints are exported (`ExportFilter`): a fixed
opponent's turns (base, another model, an API model, random) become training targets only when named.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import attrs

from unstable_core.errors import UnstableError
from unstable_core.io import dumps_json
from unstable_core.report.checkpoint_rates import CKPT_PREFIX, run_games

OUTCOMES = ("win", "draw", "loss")


@attrs.frozen
class ChatFormat:
    """A chat format: what opens the text, one turn (a regex with groups role and content) and the opened
    assistant turns a prompt may end with."""

    name: str
    prefix: str
    turn: str
    generations: tuple[str, ...]
    roles: dict[str, str] = attrs.field(factory=dict)  # the format's role name -> the messages' one


CHAT_FORMATS = (
    ChatFormat("chatml", "", r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>\n", ("<|im_start|>assistant\n",)),
    ChatFormat(
        "gemma",
        "<bos>",
        r"<start_of_turn>(\w+)\n(.*?)<end_of_turn>\n",
        ("<start_of_turn>model\n",),
        {"model": "assistant"},
    ),
    ChatFormat(
        "llama3",
        "<|begin_of_text|>",
        r"<\|start_header_id\|>(\w+)<\|end_header_id\|>\n\n(.*?)<\|eot_id\|>\n?",
        (
            "<|start_header_id|>assistant<|end_header_id|>\n\n",
            "<|start_header_id|>assistant<|end_header_id|>",
        ),
    ),
)


def prompt_messages(prompt: str) -> list[dict[str, str]] | None:
    """The system/user messages of a chat-formatted prompt that ends with an opened assistant turn, or None
    when the prompt is in no known chat format (or ends otherwise, e.g. inside a <think> block). The turns
    must cover the prompt exactly, so the messages rendered in the same format give the prompt back.
    The prompt of an API model's turn (openai:MODEL) is the JSON of the messages it was sent."""
    from unstable_core.inference.chat_prompt import chat_messages

    sent = chat_messages(prompt)
    if sent is not None:
        return sent
    for fmt in CHAT_FORMATS:
        gen = next((g for g in fmt.generations if prompt.endswith(g)), None)
        if gen is None or not prompt.startswith(fmt.prefix):
            continue
        turns = prompt[len(fmt.prefix) : len(prompt) - len(gen)]
        matches = list(re.finditer(fmt.turn, turns, flags=re.DOTALL))
        if not matches or "".join(m.group(0) for m in matches) != turns:
            continue
        return [{"role": fmt.roles.get(m.group(1), m.group(1)), "content": m.group(2)} for m in matches]
    return None


def seat_outcome(pid: int, rewards: dict[int, float]) -> str:
    """win / draw / loss of seat `pid` against the best other seat (alone: the sign of its reward)."""
    mine = rewards[pid]
    others = [r for p, r in rewards.items() if p != pid]
    theirs = max(others) if others else 0.0
    return "win" if mine > theirs else "draw" if mine == theirs else "loss"


def is_checkpoint(uid: str) -> bool:
    return uid.startswith(CKPT_PREFIX) and uid[len(CKPT_PREFIX) :].isdigit()


@attrs.frozen
class ExportFilter:
    """Which turns to export; an empty tuple means any."""

    outcomes: tuple[str, ...] = ()
    envs: tuple[str, ...] = ()
    checkpoints: tuple[str, ...] = ()  # checkpoint uids (ckpt-N)
    kinds: tuple[str, ...] = ()  # train / eval
    models: tuple[str, ...] = ()  # seat players; empty: the run's checkpoints; "all": every seat

    def wants_seat(self, uid: str) -> bool:
        if self.models and "all" not in self.models and uid not in self.models:
            return False
        if not self.models and not is_checkpoint(uid):
            return False
        return not self.checkpoints or uid in self.checkpoints


def export_records(games: list[dict[str, Any]], flt: ExportFilter, fmt: str = "chat") -> Iterator[dict]:
    """One record per turn of the chosen seats of the finished games that pass the filter."""
    for game in games:
        info = game["info"]
        kind = "eval" if info.get("eval") else "train"
        if info.get("failed") or (flt.kinds and kind not in flt.kinds):
            continue
        if flt.envs and info["env_id"] not in flt.envs:
            continue
        rewards = {int(p): r for p, r in info.get("final_rewards", {}).items()}
        for traj in game.get("trajectories", []):
            pid, uid = traj["pid"], traj["model_uid"]
            if not flt.wants_seat(uid) or pid not in rewards:
                continue
            outcome = seat_outcome(pid, rewards)
            if flt.outcomes and outcome not in flt.outcomes:
                continue
            for step in traj["steps"]:
                meta = {
                    "game_idx": info["game_idx"],
                    "env_id": info["env_id"],
                    "kind": kind,
                    "model": uid,
                    "policy_version": step.get("policy_version"),
                    "seat": pid,
                    "turn": step.get("turn"),
                    "outcome": outcome,
                    "final_reward": rewards[pid],
                    "opponents": {str(p): m for p, m in info["models"].items() if int(p) != pid},
                }
                yield _raw(step, meta) if fmt == "raw" else _chat(step, meta)


def _chat(step: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    opened = (step.get("step_info") or {}).get("answer_prefix", "")  # the answer's start, in the prompt
    prompt = step["obs"][: len(step["obs"]) - len(opened)] if opened else step["obs"]
    messages = prompt_messages(prompt)
    if messages is None:
        raise UnstableError(
            f"game {meta['game_idx']}, seat {meta['seat']}: its prompt is in no chat format export knows "
            f"(ChatML, Gemma, Llama 3; it starts {step['obs'][:40]!r}); use --format raw"
        )
    return {
        "messages": [*messages, {"role": "assistant", "content": opened + step["act"]}],
        "metadata": {**meta, "action": step["action"], "invalid_move": step["invalid_move"]},
    }


def _raw(step: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    return {
        **meta,
        "prompt": step["obs"],
        "completion": step["act"],
        "action": step["action"],
        "prompt_ids": step["prompt_ids"],
        "completion_ids": step["completion_ids"],
        "logprobs": step["logprobs"],
        "reward": step["reward"],
        "step_final_reward": step["final_reward"],
        "shaping": step["shaping"],
        "format_ok": step["format_ok"],
        "invalid_move": step["invalid_move"],
    }


def export_run(run_dir: Path, flt: ExportFilter, fmt: str, out: IO[str], warn: Callable[[str], None]) -> int:
    """Write the records of the run's games to `out`, one JSON line each, and `warn` about each file whose
    lines were skipped; returns how many records were written."""
    if not (run_dir / "games" / "games.jsonl").is_file():
        raise UnstableError(
            f"{run_dir} has no games/games.jsonl: give the directory of a run (runs/<name>) that finished games"
        )
    skipped: dict[Path, list[int]] = {}
    records = export_records(run_games(run_dir, skipped), flt, fmt)
    for path, lines in skipped.items():
        numbers = ", ".join(map(str, lines[:5])) + (f" and {len(lines) - 5} more" if len(lines) > 5 else "")
        warn(
            f"warning: skipped line {numbers} of {path}: not valid JSON (a line cut short when the run was "
            "killed); the games on it are not exported"
        )
    count = 0
    for record in records:
        out.write(dumps_json(record) + "\n")
        count += 1
    return count
