"""Encoding game prompts without re-tokenising what earlier turns already tokenised.

A turn's prompt is mostly text seen before: the chat template's frame, the game's rules, the history's
lines, the board's rows. Tokenising it whole costs most of a millisecond on a CPU (the pre-tokeniser's
regex, per character), most of a turn. `PromptEncoder` cuts the text into lines at points that no
pre-token crosses, remembers each line's ids and text, and joins them. Where such points lie depends on
the pre-tokeniser: GPT-2's regex (SmolLM2, GPT-2) never crosses from a non-space character into a
whitespace run (cut before each line's newline run); the GPT-4 style regex (Llama 3, Qwen) never
crosses from a newline into a non-space character (cut after it). The ids are exactly
`tokenizer.encode(text, add_special_tokens=False)` and the text exactly `tokenizer.decode(ids)`: each
tokenizer's first prompts are encoded whole too and the first rule that agrees on all of them is kept
(none: no cache); after that one prompt in `recheck_every` is compared again, and a mismatch turns the
cache off for that tokenizer for good (it then encodes every prompt whole, as before).
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable
from typing import Any

import attrs

#: candidate cut rules, tried in this order: a cut point is a zero-width match
CUT_RULES: dict[str, re.Pattern[str]] = {
    "before-newlines": re.compile(r"(?<=\S)(?=[^\S\n]*\n)"),  # GPT-2 regex: "x| \n\ny"
    "after-newlines": re.compile(r"(?<=\n)(?=\S)"),  # GPT-4 style regex: "x \n\n|y"
}


def cut_before_newlines(text: str) -> list[str]:
    """`CUT_RULES["before-newlines"].split(text)`, several times faster: the regex tries its lookbehind at
    every character (tens of microseconds a prompt), this scans lines with `str.split` and `rstrip`.

    A cut lies where a line's trailing run of non-newline whitespace starts, when the line has a
    non-space character before it (`rstrip()` strips what the regex calls whitespace, and a line holds
    no newline).
    """
    pieces = []
    start = end = 0
    lines = text.split("\n")
    for line in lines[:-1]:
        kept = len(line.rstrip())
        if kept:
            pieces.append(text[start : end + kept])
            start = end + kept
        end += len(line) + 1
    pieces.append(text[start:])
    return pieces


def cut_after_newlines(text: str) -> list[str]:
    """`CUT_RULES["after-newlines"].split(text)`, faster: a cut lies at the start of every line but the
    first whose first character is not whitespace."""
    pieces = []
    start = 0
    lines = text.split("\n")
    end = len(lines[0]) + 1
    for line in lines[1:]:
        if line and not line[0].isspace():
            pieces.append(text[start:end])
            start = end
        end += len(line) + 1
    pieces.append(text[start:])
    return pieces


#: each rule of CUT_RULES as a function (the same pieces, see tests/test_prompt_tokens.py)
CUTTERS: dict[str, Callable[[str], list[str]]] = {
    "before-newlines": cut_before_newlines,
    "after-newlines": cut_after_newlines,
}


@attrs.define
class _Lines:
    """One cut rule's memo: line -> (its ids, the decoding of those ids)."""

    name: str
    memo: dict[str, tuple[tuple[int, ...], str]] = attrs.field(factory=dict)
    cut: Callable[[str], list[str]] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.cut = CUTTERS[self.name]


@attrs.define
class PromptEncoder:
    """Line-memoised prompt encoding for one tokenizer, checked against the tokenizer's own encoding."""

    tokenizer: Any
    checked_first: int = 32  # prompts encoded both ways while a rule is chosen
    recheck_every: int = 256  # after that, one prompt in this many is compared again
    max_lines: int = 65_536  # memo size; when full it is cleared (a game's lines come back within turns)
    prompts: int = 0
    mismatches: int = 0
    _candidates: list[_Lines] = attrs.field(factory=lambda: [_Lines(name) for name in CUT_RULES])

    @property
    def rule(self) -> str | None:
        """The name of the cut rule in use (while choosing: the first still agreeing); None: no cache."""
        if not self._candidates:
            return None
        return self._candidates[0].name

    def encode(self, text: str) -> tuple[str, list[int]]:
        """(decode(ids), ids) of `text`, as `tokenizer.encode(text, add_special_tokens=False)` gives them."""
        self.prompts += 1
        if not self._candidates:
            return self._whole(text)
        if self.prompts <= self.checked_first or self.prompts % self.recheck_every == 0:
            whole = self._whole(text)
            agreeing = [c for c in self._candidates if self._joined(c, text) == whole]
            self.mismatches += len(self._candidates) - len(agreeing)
            if self.prompts < self.checked_first:
                self._candidates = agreeing
            elif self.prompts == self.checked_first:
                self._candidates = agreeing[:1]  # the rule chosen
            elif len(agreeing) < len(self._candidates):
                self._candidates = []  # a chosen rule that disagrees is not replaced: the cache is off
            return whole
        return self._joined(self._candidates[0], text)

    def _joined(self, lines: _Lines, text: str) -> tuple[str, list[int]]:
        """(decoding, ids) of `text` put together from the memo of its pieces (the new ones encoded first)."""
        pieces = lines.cut(text)
        memo = lines.memo
        try:
            entries = [memo[piece] for piece in pieces]
        except KeyError:  # a piece not seen yet: encode the new ones in one batch
            self._learn(lines, pieces)
            entries = [memo[piece] for piece in pieces]
        ids: list[int] = []
        for piece_ids, _ in entries:
            ids.extend(piece_ids)
        return "".join([piece_text for _, piece_text in entries]), ids

    def _learn(self, lines: _Lines, pieces: list[str]) -> None:
        """Add the pieces missing from `lines.memo` to it (clearing it first when they would overfill it)."""
        memo = lines.memo
        missing = [p for p in dict.fromkeys(pieces) if p not in memo]
        if len(memo) + len(missing) > self.max_lines:
            memo.clear()
        for piece, piece_ids in zip(missing, self._encode_batch(missing), strict=True):
            memo[piece] = (tuple(piece_ids), self.tokenizer.decode(piece_ids))

    def _encode_batch(self, pieces: list[str]) -> list[list[int]]:
        if len(pieces) == 1:
            return [list(self.tokenizer.encode(pieces[0], add_special_tokens=False))]
        return [list(x) for x in self.tokenizer(pieces, add_special_tokens=False)["input_ids"]]

    def _whole(self, text: str) -> tuple[str, list[int]]:
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        return self.tokenizer.decode(ids), ids


_ENCODERS: weakref.WeakKeyDictionary[Any, PromptEncoder] = weakref.WeakKeyDictionary()


def prompt_encoder(tokenizer: Any) -> PromptEncoder | None:
    """The shared PromptEncoder of a Hugging Face fast tokenizer (None for any other: it encodes whole)."""
    if getattr(tokenizer, "backend_tokenizer", None) is None:
        return None
    try:
        encoder = _ENCODERS.get(tokenizer)
    except TypeError:  # not weak-referenceable
        return None
    if encoder is None:
        encoder = _ENCODERS[tokenizer] = PromptEncoder(tokenizer)
    return encoder


# observations that a chat template would change if it trimmed, escaped or otherwise rewrote its content
_PROBES = ("\u2063", " \n\t<b>&amp;'\"{{ x }}{% raw %}\\ \u00e9\n\n ")
_FRAMES: weakref.WeakKeyDictionary[Any, dict[Any, tuple[str, str] | None]] = weakref.WeakKeyDictionary()


def template_frame(template: Any, tokenizer: Any) -> tuple[str, str] | None:
    """(head, tail) with `template(obs, tokenizer) == head + obs + tail` for every observation, for a
    template that declares `observation_slot` (its observation enters as is, once) and renders the probe
    observations that way with this tokenizer; else None (render it every turn). Rendered once per
    tokenizer: a chat template costs tens of microseconds per call."""
    if not getattr(template, "observation_slot", False):
        return None
    try:
        frames = _FRAMES.setdefault(tokenizer, {})
    except TypeError:  # not weak-referenceable
        return None
    if template not in frames:
        frames[template] = _frame(template, tokenizer)
    return frames[template]


def _frame(template: Any, tokenizer: Any) -> tuple[str, str] | None:
    first = template(_PROBES[0], tokenizer)
    if first.count(_PROBES[0]) != 1:
        return None
    head, tail = first.split(_PROBES[0])
    if any(template(probe, tokenizer) != head + probe + tail for probe in _PROBES[1:]):
        return None
    return head, tail
