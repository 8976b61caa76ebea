"""Generated integer arithmetic problems: a task that needs no download.

Difficulty d means d binary operations on d + 1 positive integer operands:
- 1: `a + b` or `a - b`, operands 1..20; the answer is never negative.
- 2: `a op b op c` with op among `+ - *`, operands 1..20, no parentheses (usual precedence).
- 3 to 5: a random expression of d operations among `+ - * /`, operands 1..50, with at least one pair of
  parentheses (placed only where the expression needs them, plus around a right operand of the same
  precedence: `a - (b + c)`); `/` divides exactly, its divisor is chosen among the dividend's divisors.
Every answer, and every intermediate value, is an integer with absolute value below 10**6. Problem
(index, difficulty, seed) is always the same question; different indices give different ones, bar chance.
"""

from __future__ import annotations

import random

import attrs

DIFFICULTIES = range(1, 6)
_LIMIT = 10**6  # answers and intermediate values stay strictly below this in absolute value
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


@attrs.frozen
class _Expr:
    """An expression as shown, its exact value, its top operation (None for a number), its largest |value|."""

    text: str
    value: int
    op: str | None = None
    peak: int = 0


def _number(value: int) -> _Expr:
    return _Expr(str(value), value, None, abs(value))


def _apply(op: str, left: int, right: int) -> int:
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    quotient, remainder = divmod(left, right)
    if remainder:
        raise ValueError(f"{left} / {right} is not an integer")
    return quotient


def _combine(left: _Expr, op: str, right: _Expr) -> _Expr:
    """`left op right`, parenthesised so that the text reads as this expression with usual precedence."""
    level = _PRECEDENCE[op]
    left_text = left.text
    if left.op is not None and _PRECEDENCE[left.op] < level:
        left_text = f"({left_text})"
    right_text = right.text
    if right.op is not None and (
        _PRECEDENCE[right.op] < level
        or (_PRECEDENCE[right.op] == level and not (op == right.op and op in "+*"))
    ):
        right_text = f"({right_text})"
    value = _apply(op, left.value, right.value)
    return _Expr(f"{left_text} {op} {right_text}", value, op, max(abs(value), left.peak, right.peak))


def _flat(rng: random.Random, operations: int, ops: str, high: int) -> _Expr:
    """`a op b (op c)`: one or two operations, no parentheses needed."""
    a, b = _number(rng.randint(1, high)), _number(rng.randint(1, high))
    first = rng.choice(ops)
    if operations == 1:
        if first == "-" and a.value < b.value:  # difficulty 1 answers are never negative
            a, b = b, a
        return _combine(a, first, b)
    second, c = rng.choice(ops), _number(rng.randint(1, high))
    if _PRECEDENCE[second] > _PRECEDENCE[first]:
        return _combine(a, first, _combine(b, second, c))
    return _combine(_combine(a, first, b), second, c)


def _tree(rng: random.Random, operations: int, high: int) -> _Expr:
    """A random expression of `operations` operations among + - * /, operands 1..high."""
    if operations == 0:
        return _number(rng.randint(1, high))
    op = rng.choice("+-*/")
    if op == "/":
        left = _tree(rng, operations - 1, high)
        divisors = [k for k in range(2, high + 1) if left.value % k == 0]
        divisors = [k for k in divisors if k != abs(left.value)] or divisors  # x / x only when nothing else
        if divisors:
            return _combine(left, "/", _number(rng.choice(divisors)))
        return _combine(left, rng.choice("+-*"), _number(rng.randint(1, high)))
    on_left = rng.randint(0, operations - 1)
    left = _tree(rng, on_left, high)
    return _combine(left, op, _tree(rng, operations - 1 - on_left, high))


def _draw(rng: random.Random, difficulty: int) -> _Expr | None:
    """One candidate problem; None when it breaks a rule of its difficulty (too large, no parentheses)."""
    if difficulty <= 2:
        expr = _flat(rng, difficulty, "+-" if difficulty == 1 else "+-*", 20)
    else:
        expr = _tree(rng, difficulty, 50)
        if "(" not in expr.text:
            return None
    return expr if expr.peak < _LIMIT else None


def make_problem(index: int, difficulty: int, seed: int = 0) -> tuple[str, str]:
    """(question, integer answer as text) of problem `index` at `difficulty` (levels: module docstring)."""
    if isinstance(difficulty, bool) or not isinstance(difficulty, int) or difficulty not in DIFFICULTIES:
        raise ValueError(
            f"arithmetic difficulty must be {DIFFICULTIES[0]}..{DIFFICULTIES[-1]} (an int), got {difficulty!r}"
        )
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"arithmetic problem index must be an int >= 0, got {index!r}")
    rng = random.Random(f"arithmetic:{seed}:{difficulty}:{index}")
    for _ in range(10_000):
        expr = _draw(rng, difficulty)
        if expr is not None:
            return f"What is {expr.text}?", str(expr.value)
    raise RuntimeError(f"no arithmetic problem drawn for index {index} at difficulty {difficulty}")
