"""Kuhn Poker's 12 first-round information sets as learner steps: the saturation test's and the capacity
benchmark's material, built on the real path (the real env driven to each set, the run's template and
tokenizer, the legal answers recorded as the game loop records them, a learner's own `update`).

A fixed card-dependent target stands in for the game's values: check J and Q first or after a check, bet
K; fold J facing a bet, call Q and K (exploitability 1/6). It is a yardstick of what a signal can teach,
never a training signal of a run.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import attrs

from unstable_core.games.legal_answers import AnswerTokens
from unstable_core.learners.legal import LegalState, answer_logprobs, legal_logq
from unstable_core.types import LEGAL, Step

ENV_ID = "KuhnPoker-v0-chips"
TEMPLATE = "kuhn-compact"
#: the target answer per OpenSpiel history, for cards J, Q, K
TARGET = {
    "": ("[check]", "[check]", "[bet]"),
    "p": ("[check]", "[check]", "[bet]"),
    "b": ("[fold]", "[call]", "[call]"),
    "pb": ("[fold]", "[call]", "[call]"),
}
AGGRESSIVE = ("[bet]", "[call]")  # the card-blind policy of the strategy recipe: bet and call always


def target_of(key: str) -> str:
    """The target answer at an information set `key` (card digit, then the history)."""
    return TARGET[key[1:]][int(key[0])]


@attrs.frozen
class KuhnSet:
    """One information set as a learner step with its legal answers (values unset)."""

    key: str
    step: Step

    @property
    def moves(self) -> list[str]:
        return list(self.step.step_info[LEGAL]["moves"])


def kuhn_sets(tokenizer: Any, env_id: str = ENV_ID, template: str = TEMPLATE) -> list[KuhnSet]:
    """The 12 sets rendered with `template` for `tokenizer`, in OpenSpiel's order."""
    from unstable_core.games.templates import answer_prompt
    from unstable_core.probes.kuhn_exploitability import positions

    prompt = answer_prompt(template, tokenizer)
    tokens = AnswerTokens(tokenizer)
    sets = []
    for p in positions(env_id):
        text, ids = prompt.render(p.observation)
        moves = list(p.answers)
        opened = prompt.prefix if prompt.prefix and text.endswith(prompt.prefix) else ""
        legal = {"moves": moves, "ids": [tokens.ids(m, opened) for m in moves]}
        step = Step(
            pid=p.pid, env_id=env_id, obs=text, act="", prompt_ids=list(ids), step_info={LEGAL: legal}
        )
        sets.append(KuhnSet(p.key, step))
    return sets


def valued(kset: KuhnSet, target: str) -> Step:
    """The set's step with values +1 for `target` and -1 for the other answer (exact, as branching
    against a best responder would give them)."""
    legal = dict(kset.step.step_info[LEGAL])
    legal["values"] = [1.0 if m == target else -1.0 for m in legal["moves"]]
    return attrs.evolve(kset.step, step_info={LEGAL: legal})


def sampled(kset: KuhnSet, target: str, q: Sequence[float], rng: random.Random) -> Step:
    """The set's step as a run samples it: an answer drawn from q (the policy over the legal answers),
    reward +1 if it is the target and -1 if not; its legal answers dropped, so a learner sees only the
    sampled completion (policy gradient's view)."""
    legal = kset.step.step_info[LEGAL]
    k = rng.choices(range(len(q)), weights=list(q))[0]
    reward = 1.0 if legal["moves"][k] == target else -1.0
    return attrs.evolve(kset.step, completion_ids=list(legal["ids"][k]), reward=reward, step_info={})


def policy_q(learner: Any, sets: Sequence[KuhnSet]) -> list[list[float]]:
    """q over the legal answers at each set under the learner's current policy (no gradient)."""
    import torch

    out = []
    with torch.no_grad():
        for kset in sets:
            state = LegalState.of(kset.step)
            out.append(legal_logq(answer_logprobs(learner, state)).exp().tolist())
    return out


def target_q(learner: Any, sets: Sequence[KuhnSet], targets: Sequence[str]) -> dict[str, float]:
    """q(target) per set key."""
    found = policy_q(learner, sets)
    return {s.key: q[s.moves.index(t)] for s, q, t in zip(sets, found, targets, strict=True)}


CARD_TOKENS = (" J", " Q", " K")  # how kuhn-compact writes the cards ("Your card: J", "Cards J < Q < K")
ANSWER_WORDS = ("check", "bet", "fold", "call")


def make_kuhn_model(folder: str, card_gain: float = 20.0, hidden_size: int = 32, seed: int = 0) -> str:
    """A one-layer Llama (SmolLM2's tokenizer) that reads Kuhn Poker prompts with a strong shared feature
    and a weak card feature, as the review's model of the saturation has them: every token carries a
    constant in dimension 0; the card tokens also carry one dimension each, which the layer's uniform
    attention averages into dimensions of their own at the last position (the held card is written twice,
    the others once, in the rules), scaled by `card_gain`. The LM head puts ~all of its mass evenly on the
    four answer words and `]` (each also reads a dimension of its own, which the LoRA can learn to raise),
    so the untrained policy is uniform over the legal answers and only what the LoRA learns separates them.
    """
    import torch

    from unstable_core.model_loading import DEFAULT_MODEL, load_tokenizer
    from unstable_core.testing.tiny_model import tiny_llama

    tok = load_tokenizer(DEFAULT_MODEL)
    tok.save_pretrained(folder)
    torch.manual_seed(seed)
    model = tiny_llama(tok, hidden_size, num_layers=1, tie_word_embeddings=False)
    h = hidden_size
    with torch.no_grad():
        embed = model.get_input_embeddings().weight  # [V, H]
        embed.normal_(0.0, 0.02)
        embed[:, 0] = 10.0
        layer = model.model.layers[0]
        attn, mlp = layer.self_attn, layer.mlp
        for proj in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.down_proj):
            proj.weight.zero_()  # q, k = 0: uniform attention; no MLP output
        for k, word in enumerate(CARD_TOKENS):
            (token,) = tok.encode(word, add_special_tokens=False)
            embed[token, 1 + k] = 10.0  # the card's own dimension
            attn.v_proj.weight[k, 1 + k] = 1.0  # kv head 0 carries it ...
            attn.o_proj.weight[4 + k, k] = card_gain  # ... and head 0 writes it to dimension 4 + k
        head = model.get_output_embeddings().weight  # [V, H]
        head.normal_(0.0, 0.02)
        scale = 14.0 / (h**0.5)  # dimension 0 normalises to ~sqrt(H): logit ~14 on each favoured token
        for k, word in enumerate((*ANSWER_WORDS, "]")):
            (token,) = tok.encode(word, add_special_tokens=False)
            head[token] = 0.0
            head[token, 0] = scale
            head[token, 8 + k] = 4.0
    model.save_pretrained(folder, safe_serialization=True)
    return str(folder)
