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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from unstable_core.errors import UnstableError, describe
from unstable_core.games.templates import AnswerPrompt, answer_prompt
from unstable_core.probes.base import Position

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

    try:
        if isinstance(net, PeftModel):
            net.load_adapter(adapter, adapter_name=name, is_trainable=False)
        else:
            net = PeftModel.from_pretrained(net, adapter, adapter_name=name, is_trainable=False)
    except Exception as exc:
        raise UnstableError(
            f"checkpoint {adapter}: cannot read {adapter_file(adapter, exc)}: {describe(exc)}; the file is "
            "incomplete or damaged: measure another checkpoint"
        ) from exc
    net.set_adapter(name)
    return net.eval()


def adapter_file(adapter: str, exc: BaseException) -> Path:
    """The file of the adapter folder `adapter` that `exc` failed on: its config for a JSON error, else its
    weights (the folder itself when it has neither)."""
    folder = Path(adapter)
    if isinstance(exc, ValueError) and type(exc).__name__ == "JSONDecodeError":
        return folder / "adapter_config.json"
    weights = [folder / f for f in ("adapter_model.safetensors", "adapter_model.bin")]
    return next((w for w in weights if w.exists()), folder)


def policies_of(
    base: str, players: Sequence[tuple[str, str | None]], template: str, device: str | None = None
) -> list[tuple[str, LazyPolicy]]:
    """(label, policy) of each player of one base model: (label, None) is the base model itself, (label,
    adapter folder) a LoRA checkpoint on it; its own policies first. Nothing is loaded here: one copy of
    the model (`SharedModel`) serves them all, loaded when the first is asked, each checkpoint's adapter
    when it is; each is to be measured before the next (peft changes the model's layers in place)."""
    shared = SharedModel(base, template, device)
    ordered = [p for p in players if p[1] is None] + [p for p in players if p[1] is not None]
    return [(label, LazyPolicy(shared, adapter, label)) for label, adapter in ordered]


@attrs.define
class SharedModel:
    """One copy of a base model for the policies of its players: loaded, and its template resolved for its
    tokenizer, when the first is asked; a checkpoint's adapter loaded (and made the active one) when its
    policy is."""

    name: str
    template: str
    device: str | None = None
    net: Any = attrs.field(default=None, init=False, repr=False)
    tokenizer: Any = attrs.field(default=None, init=False, repr=False)
    prompt: AnswerPrompt | None = attrs.field(default=None, init=False, repr=False)
    adapters: int = attrs.field(default=0, init=False)

    def policy(self, adapter: str | None, label: str) -> ModelPolicy:
        """The policy of the base model itself (`adapter` None) or of the adapter folder `adapter` on it."""
        if self.net is None:
            self.net, self.tokenizer = load_model(self.name, self.device)
            self.prompt = answer_prompt(self.template, self.tokenizer)
        if adapter is not None:
            self.net = with_adapter(self.net, adapter, f"probe-{self.adapters}")
            self.adapters += 1
        return ModelPolicy(self.net, self.tokenizer, self.prompt, label=label)


@attrs.define
class LazyPolicy:
    """The policy of one player of a shared base model, made when it is first asked."""

    model: SharedModel
    adapter: str | None
    label: str
    _policy: ModelPolicy | None = attrs.field(default=None, init=False, repr=False)

    def __call__(self, positions: Sequence[Position]) -> list[dict[str, float]]:
        if self._policy is None:
            self._policy = self.model.policy(self.adapter, self.label)
        return self._policy(positions)


@attrs.define
class ModelPolicy:
    """A causal LM's probabilities of the legal answers at positions, prompted with `prompt` (a template
    resolved for its tokenizer: `templates.answer_prompt`); its scorer is made on the first call."""

    model: Any
    tokenizer: Any
    prompt: AnswerPrompt
    label: str = ""
    _scorer: Any = attrs.field(default=None, init=False, repr=False)

    @property
    def scorer(self) -> Any:
        """The log-prob scorer of the model (`inference.hf.logprob_scorer.Scorer`), padded with its pad token."""
        if self._scorer is None:
            from unstable_core.inference.hf.logprob_scorer import Scorer

            tokenizer = self.tokenizer
            pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
            self._scorer = Scorer(self.model, pad_id=int(pad or 0))
        return self._scorer

    @property
    def prefix(self) -> str:
        return self.prompt.prefix

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
            text, ids = self.prompt.render(p.observation)
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
