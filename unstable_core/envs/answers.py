"""The math answer checker of single-turn tasks: which answer a completion gives, and whether it is right.

The answer of a completion (`extract_answer`) is, in this order:
1. the content of its last closed `\\boxed{...}` (also `\\boxed {...}`, `\\fbox{...}`; nested braces allowed);
2. else the text after its last `####` (GSM8K's marker), to the end of that line;
3. else its last number: `-12`, `1,234`, `0.5`, `2.5e-3` or an inline fraction `3/4`; but not one that
   ends a copy of the question reaching back to the number before it (`10 - 5` for `What is 10 - 5?`:
   an echo of the question, not an answer; `10 - 5 = 5` answers 5);
4. else none: the completion gave no answer.
An answer that is empty after stripping whitespace is no answer. A reference that is a worked solution
(`... #### 72`, `... \\boxed{3}`) stands for the answer it gives (`reference_answer`).

An answer is right when it and the reference are both numbers of exactly the same value (`parse_number`):
integers, decimals (`.5`, `3.`, `2.50`), scientific notation, thousands separators in groups of three
(`1,234`; `1,2` is no number), fractions `a/b` and `\\frac{a}{b}` (`\\dfrac`, `\\tfrac`, `\\frac34`), mixed
numbers (`1 1/2`, `1\\frac{1}{2}`). So `0.5` = `1/2` = `\\frac{1}{2}` = `50/100`, but `0.333` != `1/3`.
Wrapping that carries no value is dropped first: `$...$`, `\\(...\\)`, outer `{}`, `\\left(5\\right)` or `(5)`,
thin spaces (`1\\,000`), a label (`x = 5`, `Answer: 5`), a unit after the number (`12 \\text{ cm}`,
`30^\\circ`), a currency sign `\\$`, a trailing period, and a percent sign: `50\\%` is 50 (the sign is dropped,
not divided by 100, as references write percentages that way). `a/0` is no number, nor is one of
over 1000 digits or with an exponent beyond +-1000 (its exact value would cost too much to build).
Otherwise (`x+1`, `\\sqrt{2}`, `(1,2)`) the two are compared as text, case-insensitively, without spaces,
`$`, `\\text{}`-style wrappers and a trailing period: `\\text{Yes}` matches `yes`.
"""

from __future__ import annotations

import re
from fractions import Fraction

import attrs

_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")

# An unsigned plain number: digits (or thousands groups of three), an optional decimal part, an exponent.
_GROUPED = r"(?:\d{1,3}(?:,\d{3})+(?!\d|,\d))"
_UNSIGNED = r"(?:(?:" + _GROUPED + r"|\d+)(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_PLAIN = re.compile(_UNSIGNED)
_SLASH = re.compile(r"(" + _UNSIGNED + r")\s*/\s*(" + _UNSIGNED + r")")
# In running text a decimal point needs a digit after it (`is 3.` ends a sentence), and a sign counts only
# where it cannot be a binary minus or plus (`10-3` ends in 3, `x = -3` in -3).
_TEXT_UNSIGNED = r"(?:(?:" + _GROUPED + r"|\d+)(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?"
_NUMBER_IN_TEXT = re.compile(
    r"(?:(?<![\w)\]}])[-+\u2212])?(?<![\d.])"
    + _TEXT_UNSIGNED
    + r"(?:[ \t]*/[ \t]*"
    + _TEXT_UNSIGNED
    + r")?(?!\d)"
)

_SPACING = re.compile(r"\\[,!;: ]|~|\\displaystyle|\\(?:left|right)(?![A-Za-z])")
_LABEL = re.compile(
    r"^(?:(?:the\s+)?(?:final\s+)?answer(?:\s+is)?\s*[:=]?|\\?[A-Za-z]\w*\s*=)\s*", re.IGNORECASE
)
_UNIT = re.compile(
    r"(?<=\S)\s*(?:\\(?:text|textrm|mathrm|mbox)\s*\{[^{}]*\}(?:\s*\^\s*(?:\{\s*\d\s*\}|\d))?"
    r"|\^\s*(?:\{\s*\\circ\s*\}|\\circ)|\u00b0)\s*$"
)
_PERCENT = re.compile(r"\\?%\s*$")
_TEXT_OPENER = re.compile(r"\\(?:text|textrm|textbf|mathrm|mathbf|mbox)\s*\{")
_FRAC_OPENER = re.compile(r"\\[dtc]?frac(?![A-Za-z])\s*")
_MAX_DEPTH = 8  # fractions nested deeper than this in fractions are no numbers
_MAX_DIGITS = 1000  # longer numbers, or exponents beyond +-1000, are no numbers
_MIXED = re.compile(r"(\d+)(?:\s+|(?=\\[dtc]?frac))(.+)", re.DOTALL)


def _brace_pairs(text: str) -> dict[int, int]:
    """Index of each `{` of `text` that closes -> index of its `}`, in one pass (`\\{`, `\\}` are literals)."""
    pairs: dict[int, int] = {}
    open_at: list[int] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            open_at.append(i)
        elif ch == "}" and open_at:
            pairs[open_at.pop()] = i
        i += 1
    return pairs


def _group_end(text: str, open_at: int) -> int | None:
    """Index of the `}` closing the `{` at `open_at`; None if it never closes."""
    return _brace_pairs(text).get(open_at)


def _last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{}`/`\\fbox{}` of `text` that closes, or None."""
    openers = list(_BOX.finditer(text))
    if not openers:
        return None
    pairs = _brace_pairs(text)
    for opener in reversed(openers):
        end = pairs.get(opener.end() - 1)
        if end is not None:
            return text[opener.end() : end]
    return None


def _squeeze(text: str) -> str:
    """`text` for finding a copy of it: no whitespace, a plain minus, lower case."""
    return re.sub(r"\s+", "", text.replace("\u2212", "-")).lower()


def _echoes(text: str, previous: re.Match[str] | None, last: re.Match[str], question: str) -> bool:
    """Whether `text`'s last number ends a copy of `question` that reaches back to the number before it."""
    if previous is None:
        return False
    return _squeeze(text[previous.start() : last.end()]) in _squeeze(question)


def extract_answer(text: str, question: str | None = None) -> str | None:
    """The answer a completion gives (rules in the module docstring), stripped; None when it gives none
    (also when its last number only echoes `question`, the prompt it answers)."""
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed.strip() or None
    if "####" in text:
        after = text.rsplit("####", 1)[1]
        line = after.splitlines()[0] if after.strip() else ""
        return line.strip() or None
    previous = last = None
    for match in _NUMBER_IN_TEXT.finditer(text):
        previous, last = last, match
    if last is None or (question is not None and _echoes(text, previous, last, question)):
        return None
    return last.group().strip()


def reference_answer(reference: str) -> str:
    """A dataset's reference as an answer: a worked solution (`\\boxed{}`, GSM8K's `#### 72`) stands for
    the answer it gives; anything else is taken as it is, stripped."""
    if _BOX.search(reference) or "####" in reference:
        answer = extract_answer(reference)
        if answer is not None:
            return answer
    return reference.strip()


def _strip_wrapper(s: str) -> str:
    """`s` without one layer of value-less wrapping around the whole of it (or `s` when there is none)."""
    if len(s) >= 2 and s[0] == s[-1] == "$":
        return s.strip("$")
    if s.startswith("$") and s.count("$") == 1:  # a currency sign
        return s[1:]
    if s.startswith("\\$"):
        return s[2:]
    for start, end in (("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(start) and s.endswith(end) and len(s) >= 4:
            return s[2:-2]
    if s.startswith("{") and _group_end(s, 0) == len(s) - 1:
        return s[1:-1]
    text = _TEXT_OPENER.match(s)
    if text and _group_end(s, text.end() - 1) == len(s) - 1:
        return s[text.end() : -1]
    if s.startswith("(") and s.endswith(")") and "," not in s:  # (1,2) is a pair, not a number
        depth = 0
        for i, ch in enumerate(s):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth == 0:
                return s[1:-1] if i == len(s) - 1 else s
    return s


def _unwrap(text: str) -> str:
    """`text` without the wrapping, labels and units that carry no value (see the module docstring)."""
    s = _SPACING.sub("", text.replace("\u2212", "-"))
    for _ in range(20):
        before = s
        s = s.strip().rstrip(".").strip()
        s = _strip_wrapper(s)
        s = _LABEL.sub("", s)
        s = _UNIT.sub("", s)
        s = _PERCENT.sub("", s)
        if s == before:
            break
    return s.strip()


def _ratio(top: Fraction | None, bottom: Fraction | None) -> Fraction | None:
    if top is None or bottom is None or bottom == 0:
        return None
    return top / bottom


def _plain(s: str) -> Fraction | None:
    """An unsigned integer, decimal or scientific number, else None (also when it is absurdly large or
    small, which no answer is: building its exact value could exhaust time and memory)."""
    if not _PLAIN.fullmatch(s):
        return None
    mantissa, _, exponent = s.replace(",", "").lower().partition("e")
    if len(mantissa) > _MAX_DIGITS or len(exponent) > 5 or (exponent and abs(int(exponent)) > _MAX_DIGITS):
        return None
    return Fraction(mantissa) * Fraction(10) ** int(exponent or 0)


def _frac(s: str, depth: int) -> Fraction | None:
    """The value of `s` when it is exactly `\\frac{a}{b}` (or `\\dfrac`, `\\tfrac`, `\\frac34`), else None."""
    opener = _FRAC_OPENER.match(s)
    if not opener:
        return None
    pos, args = opener.end(), []
    for _ in range(2):
        while pos < len(s) and s[pos].isspace():
            pos += 1
        if pos < len(s) and s[pos] == "{":
            end = _group_end(s, pos)
            if end is None:
                return None
            args.append(s[pos + 1 : end])
            pos = end + 1
        elif pos < len(s) and s[pos].isdigit():  # \frac34: one-digit arguments need no braces
            args.append(s[pos])
            pos += 1
        else:
            return None
    if s[pos:].strip():
        return None
    return _ratio(_parse(args[0], depth + 1), _parse(args[1], depth + 1))


def _fraction(s: str, depth: int) -> Fraction | None:
    """The value of `s` when it is an unsigned `a/b` or a `\\frac`, else None."""
    slash = _SLASH.fullmatch(s)
    if slash:
        return _ratio(_plain(slash.group(1)), _plain(slash.group(2)))
    return _frac(s, depth)


def _unsigned_value(s: str, depth: int) -> Fraction | None:
    value = _plain(s)
    if value is None:
        value = _fraction(s, depth)
    if value is None:
        mixed = _MIXED.fullmatch(s)
        if mixed:  # 1 1/2, 1\frac{1}{2}: a whole number and a proper fraction
            part = _fraction(mixed.group(2).strip(), depth)
            if part is not None and 0 < part < 1:
                value = int(mixed.group(1)) + part
    return value


def parse_number(text: str) -> Fraction | None:
    """The exact value of an answer that is a number (forms in the module docstring), else None."""
    return _parse(text, 0)


def _parse(text: str, depth: int) -> Fraction | None:
    """`parse_number` of `text` found `depth` `\\frac`s deep; deeper than a few is no number."""
    if depth > _MAX_DEPTH:
        return None
    s = _unwrap(text)
    sign = 1
    if s and s[0] in "+-":
        sign, s = (-1 if s[0] == "-" else 1), s[1:].lstrip()
    if not s or s[0] in "+-":
        return None
    value = _unsigned_value(s, depth)
    return None if value is None else sign * value


def _normalise_text(text: str) -> str:
    """`text` for a comparison as text: no `$`, `\\text{}`-style wrappers, spaces or final period; lower case."""
    s = _SPACING.sub("", text.replace("\\$", "").replace("$", ""))
    pairs = _brace_pairs(s)
    dropped: set[int] = set()  # indices of the wrappers' openers and closing braces
    for opener in _TEXT_OPENER.finditer(s):
        end = pairs.get(opener.end() - 1)
        if end is not None:
            dropped.update(range(opener.start(), opener.end()))
            dropped.add(end)
    s = "".join(ch for i, ch in enumerate(s) if i not in dropped)
    return re.sub(r"\s+", "", s).rstrip(".").lower()


def answers_match(answer: str | None, reference: str) -> bool:
    """Whether `answer` is `reference`: by exact value when both are numbers, else as normalised text."""
    if answer is None:
        return False
    mine, theirs = parse_number(answer), parse_number(reference)
    if mine is not None and theirs is not None:
        return mine == theirs
    normalised = _normalise_text(answer)
    return bool(normalised) and normalised == _normalise_text(reference)


@attrs.frozen
class AnswerCheck:
    """The verdict on one completion, with what it was based on (for logs and invalid-move counts)."""

    correct: bool
    answer: str | None  # what the completion answers; None: no answer found
    reference: str  # the reference answer compared with (after `reference_answer`)

    @property
    def reason(self) -> str:
        """`correct`, `no answer found`, or `wrong: <answer> != <reference>`."""
        if self.correct:
            return "correct"
        if self.answer is None:
            return "no answer found"
        return f"wrong: {self.answer} != {self.reference}"


def check_answer(completion: str, reference: str, question: str | None = None) -> AnswerCheck:
    """Grade one completion against a reference answer (or worked solution): extract, compare, explain.
    With the `question`, a completion that only echoes it gives no answer (`10 - 5` for 5)."""
    answer, expected = extract_answer(completion, question), reference_answer(reference)
    return AnswerCheck(correct=answers_match(answer, expected), answer=answer, reference=expected)
