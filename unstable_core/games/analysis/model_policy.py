"""A model (a base model, or a LoRA checkpoint on one) as a probe's policy: its probability of each legal
answer at a position, prompted exactly as a run prompts it.

The prompt is the run's: the position's observation through the run's template and tokenizer (the game
loop's renderer, resolved once per tokenizer by `templates.answer_prompt`), ending with the template's
answer prefix (`move`: `[`). An answer's probability is that of the completion that plays it, sampled at temperature 1: the
spelling after the prefix (`[check]` -> `check`) in the tokenizer's own tokens, then any one token whose
text starts with the spelling's closing `]` (`]`, `].`, `]]`: the game loop reads the first `[...]`), so
that `check]` followed by anything is counted once. A move's probability sums the spellings the game
accepts that the probe lists (Kuhn Poker: `check`, `Check`, `CHECK`); any other completion, including
another spelling the game would also take, counts as illegal mass.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any

from unstable_core.errors import UnstableError
from unstable_core.games.analysis.probe import Position
from unstable_core.games.templates import AnswerPrompt, answer_prompt

CLOSING = "]"  # TextArena's moves end with it


@functools.cache
def _closing_ids(tokenizer: Any, closing: str) -> tuple[int, ...]:
    """The ids of every token whose text starts with `closing`."""
    return tuple(i for i in range(len(tokenizer)) if tokenizer.decode([i]).startswith(closing))


def load_model(name: str, device: str | None = None) -> tuple[Any, Any]:
    """(the causal LM `name` in eval mode, its tokenizer); on a CPU its Linear layers run on oneDNN's packed
    fp32 weights (faster; the same sums in another order)."""
    from unstable_core.inference.hf.packed_linear import pack_linear_layers
    from unstable_core.model_loading import load_causal_lm, load_tokenizer

    net = load_causal_lm(name, device=device)
    pack_linear_layers(net)
    return net, load_tokenizer(name)


def with_adapter(net: Any, adapter: str, name: str = "probe") -> Any:
    """`net` with the LoRA adapter folder `adapter` loaded as `name` and active: a peft model around it
    (peft changes its layers in place), or, when `net` is one already, that model with one more adapter."""
    from peft import PeftModel

    if isinstance(net, PeftModel):
        net.load_adapter(adapter, adapter_name=name, is_trainable=False)
    else:
        net = PeftModel.from_pretrained(net, adapter, adapter_name=name, is_trainable=False)
    net.set_adapter(name)
    return net.eval()


def policies_of(
    base: str, players: Sequence[tuple[str, str | None]], template: str, device: str | None = None
) -> Iterator[tuple[str, ModelPolicy]]:
    """(label, policy) of each player of one base model: (label, None) is the base model itself, (label,
    adapter folder) a LoRA checkpoint on it. One copy of the model serves them all; its own policies come
    first, and each is to be measured before the next is made (peft changes the model's layers in place).
    `template` is resolved once, for them all."""
    net, tokenizer = load_model(base, device)
    prompt = answer_prompt(template, tokenizer)
    for label, adapter in players:
        if adapter is None:
            yield label, ModelPolicy(net, tokenizer, prompt, label=label)
    wrapped = None
    for k, (label, adapter) in enumerate(p for p in players if p[1] is not None):
        wrapped = with_adapter(net if wrapped is None else wrapped, adapter, f"probe-{k}")
        yield label, ModelPolicy(wrapped, tokenizer, prompt, label=label)


class ModelPolicy:
    """A causal LM's probabilities of the legal answers at positions, prompted with `prompt` (a template
    resolved for its tokenizer: `templates.answer_prompt`)."""

    def __init__(self, model: Any, tokenizer: Any, prompt: AnswerPrompt, label: str = "") -> None:
        from unstable_core.games.analysis.scoring import Scorer

        self.tokenizer, self.label = tokenizer, label
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.scorer = Scorer(model, pad_id=int(pad or 0))
        self.render, self.prefix = prompt.render, prompt.prefix

    @classmethod
    def load(
        cls, model: str, adapter: str | None = None, template: str = "move", device: str | None = None
    ) -> ModelPolicy:
        """The base `model` (alias, hub id, folder), with the LoRA `adapter` folder on it if given."""
        net, tokenizer = load_model(model, device)
        if adapter is not None:
            net = with_adapter(net, adapter)
        return cls(net, tokenizer, answer_prompt(template, tokenizer), label=adapter or model)

    def completions(self, prompt: str, spellings: Sequence[str]) -> list[list[int]]:
        """The token ids of each spelling's completion after `prompt`, without the closing `]`."""
        opened = self.prefix if self.prefix and prompt.endswith(self.prefix) else ""
        out = []
        for spelling in spellings:
            if not spelling.endswith(CLOSING):
                raise UnstableError(
                    f"answer {spelling!r} does not end with {CLOSING!r}; a probe's answers are moves as TextArena writes them"
                )
            text = spelling[len(opened) :] if opened and spelling.startswith(opened) else spelling
            text = text[: -len(CLOSING)]
            out.append(list(self.tokenizer.encode(text, add_special_tokens=False)) if text else [])
        return out

    def __call__(self, positions: Sequence[Position]) -> list[dict[str, float]]:
        import math

        prompts, answers, owners = [], [], []
        for p in positions:
            text, ids = self.render(p.observation)
            prompts.append(ids)
            moves = [(move, s) for move, spellings in p.answers.items() for s in spellings]
            answers.append(self.completions(text, [s for _, s in moves]))
            owners.append([move for move, _ in moves])
        closing = _closing_ids(self.tokenizer, CLOSING)
        scores = self.scorer.logprobs(prompts, answers, closing)
        out = []
        for p, moves, logps in zip(positions, owners, scores, strict=True):
            probs = dict.fromkeys(p.answers, 0.0)
            for move, logp in zip(moves, logps, strict=True):
                probs[move] += math.exp(logp)
            out.append(probs)
        return out
