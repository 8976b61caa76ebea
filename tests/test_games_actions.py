"""extract_action: the last closed \\boxed{...} becomes the action, bracketed for TextArena."""

import pytest

from unstable_core.games.actions import extract_action, last_boxed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I take the centre. \\boxed{4}", ("[4]", True)),
        ("\\boxed{[A C]}", ("[A C]", True)),
        ("first \\boxed{1} then better \\boxed{ 7 }", ("[7]", True)),
        ("nested \\boxed{\\frac{1}{2}} done", ("[\\frac{1}{2}]", True)),
        ("\\boxed{{a}{b}}", ("[{a}{b}]", True)),
        ("half bracket \\boxed{x]}", ("x]", True)),
        ("  no box here, [3]  ", ("no box here, [3]", False)),
        ("empty \\boxed{ } box", ("empty \\boxed{ } box", False)),
        ("\\boxed{5} and truncated \\boxed{6", ("[5]", True)),
        ("truncated only \\boxed{6", ("truncated only \\boxed{6", False)),
        ("", ("", False)),
    ],
)
def test_extract_action(text, expected):
    assert extract_action(text) == expected


def test_last_boxed_keeps_inner_braces_and_skips_unclosed():
    assert last_boxed("\\boxed{a{b{c}}d} tail") == "a{b{c}}d"
    assert last_boxed("\\boxed{a} \\boxed{b{") == "a"
    assert last_boxed("nothing") is None


@pytest.mark.parametrize(
    "text, expected",
    [
        ("[bet] and then more", ("[bet]", True)),  # the first closed move; the rest left out
        ("  [col 3]\n", ("[col 3]", True)),
        ("[4]]", ("[4]", True)),
        ("[bet", ("[bet", False)),  # never closed
        ("[ ] x", ("[ ] x", False)),  # blank
        ("[[4]", ("[[4]", False)),
    ],
)
def test_extract_action_of_a_bracketed_answer(text, expected):
    """The `move` template opens the answer with `[`: the action is the answer's first closed `[...]`."""
    assert extract_action(text, bracketed=True) == expected
