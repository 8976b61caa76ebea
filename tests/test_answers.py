"""The math answer checker: extraction from completions, numbers by exact value, text as a fallback."""

from __future__ import annotations

import time
from fractions import Fraction

import attrs
import pytest

from unstable_core.envs.answers import (
    AnswerCheck,
    answers_match,
    check_answer,
    extract_answer,
    parse_number,
    reference_answer,
)

GSM8K_SOLUTION = (
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n"
    "#### 72"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # 1. the last closed \boxed{} wins
        ("so \\boxed{5}", "5"),
        ("first \\boxed{3}, on second thought \\boxed{4}", "4"),
        ("so \\boxed{1} or rather \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
        ("\\boxed{\\frac{\\sqrt{2}}{2}} done", "\\frac{\\sqrt{2}}{2}"),
        ("\\boxed {7}", "7"),
        ("\\fbox{8}", "8"),
        ("\\boxed{ 12 } and then 13", "12"),  # a box beats a later number
        ("\\boxed{3} and then \\boxed{4", "3"),  # an unclosed box is no box
        ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),  # escaped braces are text, not groups
        ("\\boxed{2} #### 9", "2"),  # a box beats the GSM8K marker
        ("the answer is 9, \\boxed{x+1}", "x+1"),
        # 2. else the text after the last ####, to the end of its line
        ("48 + 24 = 72\n#### 72", "72"),
        ("She sold 48 + 24 clips.\n#### 72\nThanks", "72"),
        ("#### 1 then #### 2\nand 3 more", "2"),
        ("#### 1,234  ", "1,234"),
        ("#### Yes", "Yes"),
        # 3. else the last number
        ("The answer is 72.", "72"),
        ("It costs $1,234.56 in all", "1,234.56"),
        ("It is -1,234 dollars", "-1,234"),
        ("x = -3", "-3"),
        ("x = \u22127", "\u22127"),
        ("10-3", "3"),  # a binary minus is no sign
        ("from 1990-2000", "2000"),
        ("about 3/4 of them", "3/4"),
        ("0.5 or .25", ".25"),
        ("pi is 3.14.", "3.14"),
        ("1e3 grams", "1e3"),
        ("sold 1,234, then stopped", "1,234"),
        ("5 apples and 7 pears", "7"),
        # 4. else nothing
        ("I do not know.", None),
        ("", None),
        ("\\boxed{}", None),
        ("\\boxed{   }", None),
        ("#### \nlater 5", None),  # the marker's line is empty
        ("\\boxed{5", "5"),  # unclosed: not a box, so the last number
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("-7", Fraction(-7)),
        ("+3", Fraction(3)),
        ("\u22127", Fraction(-7)),  # unicode minus
        ("0", Fraction(0)),
        ("1,234,567", Fraction(1234567)),
        ("1,234.5", Fraction(2469, 2)),
        ("0.5", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        ("3.", Fraction(3)),
        ("2.50", Fraction(5, 2)),
        ("1e3", Fraction(1000)),
        ("2.5E-2", Fraction(1, 40)),
        ("3/4", Fraction(3, 4)),
        ("-3/4", Fraction(-3, 4)),
        ("50/100", Fraction(1, 2)),
        ("\\frac{3}{4}", Fraction(3, 4)),
        ("\\dfrac{3}{4}", Fraction(3, 4)),
        ("\\tfrac{3}{4}", Fraction(3, 4)),
        ("\\frac34", Fraction(3, 4)),
        ("\\frac{6}{4}", Fraction(3, 2)),
        ("-\\frac{1}{2}", Fraction(-1, 2)),
        ("\\frac{-1}{2}", Fraction(-1, 2)),
        ("\\frac{1.5}{3}", Fraction(1, 2)),
        ("1 1/2", Fraction(3, 2)),
        ("1\\frac{1}{2}", Fraction(3, 2)),
        ("2 \\frac{3}{4}", Fraction(11, 4)),
        ("-1 1/2", Fraction(-3, 2)),
        ("50\\%", Fraction(50)),  # the percent sign is dropped, not divided by 100
        ("50%", Fraction(50)),
        ("$5$", Fraction(5)),
        ("$$-5$$", Fraction(-5)),
        ("\\(5\\)", Fraction(5)),
        ("\\left(5\\right)", Fraction(5)),
        ("\\left( -2 \\right)", Fraction(-2)),
        ("${\\left(5\\right)}$.", Fraction(5)),
        ("12 \\text{ cm}", Fraction(12)),
        ("12\\mathrm{kg}", Fraction(12)),
        ("9 \\text{ m}^2", Fraction(9)),
        ("30^\\circ", Fraction(30)),
        ("\\text{5}", Fraction(5)),
        ("\\$18", Fraction(18)),
        ("x = 5", Fraction(5)),
        ("x=5", Fraction(5)),
        ("answer: 5", Fraction(5)),
        ("Answer: 5", Fraction(5)),
        ("The final answer is 7", Fraction(7)),
        ("5.", Fraction(5)),
        ("  5  ", Fraction(5)),
        ("{5}", Fraction(5)),
        ("{{\\frac{1}{2}}}", Fraction(1, 2)),
        ("1\\,000", Fraction(1000)),
        ("1\\!000", Fraction(1000)),
        ("$\\left(\\frac{1}{2}\\right)$.", Fraction(1, 2)),
        ("1e999", Fraction(10) ** 999),
    ],
)
def test_parse_number_gives_the_exact_value(text, value):
    parsed = parse_number(text)
    assert isinstance(parsed, Fraction)
    assert parsed == value


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "abc",
        "1,2",  # thousands groups have three digits
        "12,34",
        "1,234,56",
        "1/0",
        "0/0",
        "\\frac{1}{0}",
        "x+1",
        "\\sqrt{2}",
        "[3]",
        "3, 4",
        "(1,2)",
        "1 2",
        "1 0.5",  # a mixed number's part is a fraction
        "1 3/2",  # ... and a proper one
        "--3",
        "3/-4",
        "\\frac{1}",
        "\\frac{x}{2}",
        "3 apples",
        "pi",
        "5!",
        "1e",
        ".",
        "1e100000000",  # too large to build: no answer is
        "9" * 5000,
    ],
)
def test_parse_number_rejects_what_is_no_number(text):
    assert parse_number(text) is None


@pytest.mark.parametrize(
    ("answer", "reference"),
    [
        ("0.5", "1/2"),
        ("\\frac{1}{2}", "0.5"),
        ("50/100", "\\frac{1}{2}"),
        ("50/100", "\\frac12"),
        ("\\dfrac{1}{2}", "1/2"),
        ("1,234", "1234"),
        ("1234.0", "1,234"),
        ("3/2", "1 1/2"),
        ("1.5", "1\\frac{1}{2}"),
        ("-7", "\u22127"),
        ("+3", "3"),
        ("1e3", "1000"),
        ("0.025", "2.5E-2"),
        ("50\\%", "50"),
        ("50%", "50\\%"),
        ("x = 5", "5"),
        ("12 \\text{ cm}", "12"),
        ("$72$", "72"),
        ("72.", "72"),
        ("1\\,000", "1000"),
        ("Yes", "yes"),
        ("\\text{B}", "B"),
        ("$\\text{(C)}$", "(c)"),
        ("$x^2$", "x^2"),
        ("x + 1", "x+1"),
        ("\\sqrt{2}", "\\sqrt{2}"),
        ("Monday.", "monday"),
    ],
)
def test_answers_that_match(answer, reference):
    assert answers_match(answer, reference) is True
    assert answers_match(reference, answer) is True


@pytest.mark.parametrize(
    ("answer", "reference"),
    [
        ("0.333", "1/3"),
        ("0.33", "\\frac{1}{3}"),
        ("12", "1,2"),
        ("-3", "3"),
        ("\\frac{1}{2}", "2"),
        ("\\frac{2}{1}", "1/2"),
        ("50\\%", "0.5"),  # the percent sign is dropped, not divided
        ("1/0", "0"),
        ("x+1", "x+2"),
        ("Yes", "No"),
        ("72", "720"),
        ("3, 4", "34"),
        ("1 1/2", "11/2"),
        ("", ""),
        ("7", "\\text{7 apples}"),
    ],
)
def test_answers_that_do_not_match(answer, reference):
    assert answers_match(answer, reference) is False
    assert answers_match(reference, answer) is False


def test_no_answer_never_matches():
    assert answers_match(None, "") is False
    assert answers_match(None, "5") is False


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        (GSM8K_SOLUTION, "72"),
        ("48 + 24 #### 1,234", "1,234"),
        ("So the area is $\\boxed{3}$.", "3"),
        ("so $x = \\boxed{\\frac{3}{4}}$", "\\frac{3}{4}"),
        ("It is \\boxed{\\frac{1}{2}}, or \\boxed{\\dfrac{1}{2}} in display", "\\dfrac{1}{2}"),
        ("  72  ", "72"),
        ("  Paris ", "Paris"),
        ("The answer is 72", "The answer is 72"),  # no marker: taken as given
        ("\\frac{1}{2}", "\\frac{1}{2}"),
    ],
)
def test_reference_answer(reference, expected):
    assert reference_answer(reference) == expected


def test_a_gsm8k_solution_checks_a_plain_completion():
    result = check_answer("Natalia sold 48 + 24 clips. The answer is 72.", GSM8K_SOLUTION)
    assert result == AnswerCheck(correct=True, answer="72", reference="72")
    assert result.reason == "correct"


def test_a_math_solution_checks_a_boxed_completion():
    result = check_answer("so $x = \\boxed{0.5}$", "Hence $x = \\boxed{\\frac{1}{2}}$.")
    assert (result.correct, result.answer, result.reference) == (True, "0.5", "\\frac{1}{2}")


def test_a_wrong_answer_says_both_sides():
    result = check_answer("\\boxed{7}", "12")
    assert (result.correct, result.answer, result.reference) == (False, "7", "12")
    assert result.reason == "wrong: 7 != 12"


def test_a_completion_without_a_number_has_no_answer():
    result = check_answer("I am not sure how to solve this.", "12")
    assert (result.correct, result.answer, result.reference) == (False, None, "12")
    assert result.reason == "no answer found"


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        ("10 - 5", None),  # the question's expression: its last number is no answer
        ("What is 10 - 5?", None),
        ("10  -   5", None),  # the same copy, spaced otherwise
        ("10 - 5 = 5", "5"),
        ("What is 10 - 5?\n5", "5"),
        ("The answer to 10 - 5 is 5.", "5"),
        ("5", "5"),  # a lone number copies nothing before it
        ("x is 5", "5"),
        ("\\boxed{10 - 5}", "10 - 5"),  # a box, or ####, is an answer even when it echoes
    ],
)
def test_a_completion_that_echoes_the_question_gives_no_answer(completion, answer):
    result = check_answer(completion, "5", question="What is 10 - 5?")
    assert (result.answer, result.correct) == (answer, answer == "5")
    assert check_answer("10 - 5", "5").correct  # without the question nothing tells an echo


def test_the_last_box_is_the_answer():
    assert check_answer("\\boxed{12} wait, no: \\boxed{13}", "13").correct is True
    assert check_answer("\\boxed{13} wait, no: \\boxed{12}", "13").correct is False


def test_an_unclosed_box_is_ignored():
    result = check_answer("\\boxed{12} and finally \\boxed{13", "12")
    assert (result.correct, result.answer) == (True, "12")


def test_a_box_outranks_a_later_number():
    result = check_answer("\\boxed{12}, which is more than 10", "12")
    assert (result.correct, result.answer) == (True, "12")


def test_a_division_by_zero_is_compared_as_text_only():
    assert check_answer("\\boxed{1/0}", "1/0").correct is True  # the same text
    assert check_answer("\\boxed{1/0}", "0").correct is False


def test_an_answer_check_is_frozen():
    result = check_answer("\\boxed{1}", "1")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        result.correct = False  # type: ignore[misc]


@pytest.mark.parametrize(
    "completion",
    [
        "a \\boxed{" * 20_000,
        "\\frac{" * 3_000 + "1" + "}{2}" * 3_000,
        "\\boxed{" + "\\frac{" * 2_000 + "1" + "}{2}" * 2_000 + "}",
        "1," * 50_000,
        "\\text{a}" * 20_000,
    ],
)
def test_hostile_completions_are_checked_quickly(completion):
    """A completion is model output: the checker must stay linear-ish and never recurse without bound."""
    start = time.perf_counter()
    result = check_answer(completion, "1")
    assert isinstance(result, AnswerCheck)
    assert time.perf_counter() - start < 10  # a quadratic scan of these takes minutes
