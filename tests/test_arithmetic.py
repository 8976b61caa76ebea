"""The generated arithmetic task: deterministic, varied, right answers, the shape each difficulty promises."""

from __future__ import annotations

import ast
import re
from fractions import Fraction

import pytest

from unstable_core.envs.answers import check_answer
from unstable_core.envs.arithmetic import DIFFICULTIES, make_problem
from unstable_core.envs.sources import ArithmeticTask

OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
N = 200  # problems looked at per difficulty


def expression(question: str) -> str:
    match = re.fullmatch(r"What is (.+)\?", question)
    assert match, question
    return match.group(1)


def evaluate(node: ast.expr, seen: dict[str, list]) -> Fraction:
    """An independent exact evaluation of the question's expression, noting its operands and operators;
    every division must be exact and every value below 10**6."""
    if isinstance(node, ast.Constant):
        assert type(node.value) is int
        seen["operands"].append(node.value)
        return Fraction(node.value)
    assert isinstance(node, ast.BinOp), ast.dump(node)
    symbol = OPERATORS[type(node.op)]
    seen["operators"].append(symbol)
    left, right = evaluate(node.left, seen), evaluate(node.right, seen)
    if symbol == "/":
        assert right != 0
        value = left / right
        assert value.denominator == 1, f"{left} / {right} is not exact"
    else:
        value = {"+": left + right, "-": left - right, "*": left * right}[symbol]
    assert abs(value) < 10**6
    return value


def inspect(question: str) -> tuple[Fraction, dict[str, list]]:
    seen: dict[str, list] = {"operands": [], "operators": []}
    value = evaluate(ast.parse(expression(question), mode="eval").body, seen)
    return value, seen


def test_difficulties_are_one_to_five():
    assert list(DIFFICULTIES) == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_a_problem_is_deterministic(difficulty):
    for index in (0, 1, 17, 10**9):
        assert make_problem(index, difficulty) == make_problem(index, difficulty)
        assert make_problem(index, difficulty, seed=3) == make_problem(index, difficulty, seed=3)
    assert make_problem(5, difficulty) == make_problem(5, difficulty, 0)


def test_known_problems_do_not_change():
    """Problem (index, difficulty, seed) is part of a task's identity: results are comparable across runs."""
    assert [make_problem(0, d) for d in DIFFICULTIES] == [
        ("What is 17 - 1?", "16"),
        ("What is 6 * 6 + 11?", "47"),
        ("What is (9 - 10 * 48) / 3?", "-157"),
        ("What is (47 + (11 - 19) + 11) / 5?", "10"),
        ("What is 30 * 7 * (16 / 4 / 2 / 2)?", "210"),
    ]
    assert make_problem(1, 4, seed=7) == ("What is (26 / 13 - (25 - 19)) / 2?", "-2")


@pytest.mark.parametrize("difficulty", [2, 3, 4, 5])
def test_indices_give_different_problems(difficulty):
    questions = {make_problem(index, difficulty)[0] for index in range(100)}
    assert len(questions) >= 95


def test_easy_indices_still_vary():
    assert len({make_problem(index, 1)[0] for index in range(100)}) >= 80  # of some 600 problems


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_seeds_give_different_problems(difficulty):
    seeded = [make_problem(index, difficulty, seed=1)[0] for index in range(50)]
    plain = [make_problem(index, difficulty)[0] for index in range(50)]
    assert sum(a != b for a, b in zip(seeded, plain, strict=True)) >= 40


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_the_answer_is_the_value_of_the_question(difficulty):
    for index in range(N):
        question, answer = make_problem(index, difficulty)
        assert re.fullmatch(r"-?[1-9]\d*|0", answer), answer
        value, _ = inspect(question)
        assert value.denominator == 1 and value == int(answer), (question, answer)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_the_shape_matches_the_difficulty(difficulty):
    high = 20 if difficulty <= 2 else 50
    allowed = {1: {"+", "-"}, 2: {"+", "-", "*"}}.get(difficulty, {"+", "-", "*", "/"})
    operators_used: set[str] = set()
    for index in range(N):
        question, answer = make_problem(index, difficulty)
        _, seen = inspect(question)
        assert len(seen["operands"]) == difficulty + 1, question
        assert len(seen["operators"]) == difficulty, question
        assert all(1 <= operand <= high for operand in seen["operands"]), question
        assert set(seen["operators"]) <= allowed, question
        operators_used |= set(seen["operators"])
        if difficulty >= 3:
            assert "(" in question, question
        else:
            assert "(" not in question, question
        if difficulty == 1:
            assert int(answer) >= 0, question
    assert operators_used == allowed  # each operator of the level shows up


@pytest.mark.parametrize("difficulty", [3, 4, 5])
def test_division_is_common_at_the_harder_levels(difficulty):
    with_division = [q for i in range(N) if "/" in (q := make_problem(i, difficulty)[0])]
    assert len(with_division) > N // 5


@pytest.mark.parametrize("difficulty", [2, 3, 4, 5])
def test_harder_levels_have_negative_answers_sometimes(difficulty):
    assert any(int(make_problem(index, difficulty)[1]) < 0 for index in range(N))


@pytest.mark.parametrize("bad", [0, 6, -1, 2.0, True, "3", None])
def test_a_bad_difficulty_is_refused_with_the_range(bad):
    with pytest.raises(ValueError, match=r"difficulty must be 1\.\.5"):
        make_problem(0, bad)


@pytest.mark.parametrize("bad", [-1, -100, 1.5, "0", True])
def test_a_bad_index_is_refused(bad):
    with pytest.raises(ValueError, match="index must be an int >= 0"):
        make_problem(bad, 2)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_the_answer_checker_accepts_the_boxed_answer(difficulty):
    for index in range(20):
        question, answer = make_problem(index, difficulty)
        assert check_answer(f"{question} Working it out... \\boxed{{{answer}}}", answer).correct
        assert check_answer(f"so the answer is {answer}.", answer).correct
        assert not check_answer(f"\\boxed{{{int(answer) + 1}}}", answer).correct


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_an_echo_of_the_question_is_never_credited(difficulty):
    """`10 - 5` for `What is 10 - 5?` (answer 5) ended in the answer: the last-number fallback credited
    51 of 2,000 difficulty-1 echoes. The task's check sees the question; an answer after it still counts."""
    task = ArithmeticTask(difficulty)
    for index in range(2000):
        item = task.item(index)
        for echo in (expression(item.prompt), item.prompt):
            assert task.check(echo, item).answer is None, item
        assert task.check(f"{expression(item.prompt)} = {item.answer}", item).correct
