"""Line-memoised prompt encoding and cached chat-template frames: the same ids and text as encoding whole."""

import random
import re

import pytest

from unstable_core.games.prompt_tokens import CUT_RULES, CUTTERS, PromptEncoder, template_frame
from unstable_core.games.templates import default_template, move_template, render_prompt
from unstable_core.inference.chat_prompt import MessagesTokenizer


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def tictactoe_prompts(tokenizer, games=12):
    """Every turn's prompt of random TicTacToe games, rendered by the default template."""
    import textarena

    rng = random.Random(0)
    texts = []
    for seed in range(games):
        env = textarena.make("TicTacToe-v0-train")
        env.reset(num_players=2, seed=seed)
        done = False
        while not done:
            _, observation = env.get_observation()
            texts.append(default_template(observation, tokenizer))
            done, _ = env.step(
                rng.choice(re.findall(r"\[\d\]", observation.rsplit("Available Moves:", 1)[1]))
            )
    return texts


def whole(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    return tokenizer.decode(ids), ids


def test_cut_rules_cut_lines_and_join_back():
    text = "a.\n\n\nPlayer 0 x.\nBoard:\n\n O | 1 \n---+---\n 3 "
    assert CUT_RULES["before-newlines"].split(text) == [
        "a.",
        "\n\n\nPlayer 0 x.",
        "\nBoard:",
        "\n\n O | 1",
        " \n---+---",
        "\n 3 ",
    ]
    assert CUT_RULES["after-newlines"].split(text) == [
        "a.\n\n\n",
        "Player 0 x.\n",
        "Board:\n\n O | 1 \n",
        "---+---\n 3 ",
    ]


def test_cutters_cut_as_the_rules_split(tokenizer):
    """The line-scanning cutters give the pieces of their rule's regex split, on prompts and on random
    text of every kind of whitespace (the regex's \\s and str.isspace agree on it)."""
    rng = random.Random(0)
    alphabet = ["a", "é", ".", "|", " ", " ", "\t", "\r", "\n", "\n", "\x0b", "\x0c", "\x1c", "\x85"]
    alphabet += ["\u00a0", "\u2028", "\u3000", "<|im_end|>"]
    texts = ["", "\n", " ", "x", "\n\nx \n"] + tictactoe_prompts(tokenizer, games=2)
    texts += ["".join(rng.choices(alphabet, k=rng.randrange(16))) for _ in range(20_000)]
    for name, rule in CUT_RULES.items():
        for text in texts:
            assert CUTTERS[name](text) == rule.split(text), (name, text)


def test_encoder_gives_the_whole_encoding_turn_after_turn(tokenizer):
    encoder = PromptEncoder(tokenizer, checked_first=8, recheck_every=1_000_000)
    texts = tictactoe_prompts(tokenizer)
    for text in texts:
        assert encoder.encode(text) == whole(tokenizer, text)
    # SmolLM2's GPT-2 pre-tokeniser: cutting after a newline run splits a "\n\n" pre-token, before it does not
    assert encoder.rule == "before-newlines" and encoder.mismatches == 1


class OddTokenizer:
    """Starts every text it encodes with token 7 (as a SentencePiece prefix space does): encoded line by
    line, a prompt would get one per line, so no cut rule agrees with it."""

    def __init__(self, inner):
        self.inner = inner

    def encode(self, text, add_special_tokens=False):
        return [7, *self.inner.encode(text, add_special_tokens=False)]

    def decode(self, ids):
        return self.inner.decode(ids)

    def __call__(self, texts, add_special_tokens=False):
        return {"input_ids": [self.encode(t) for t in texts]}


def test_a_tokenizer_no_rule_fits_is_encoded_whole(tokenizer):
    odd = OddTokenizer(tokenizer)
    encoder = PromptEncoder(odd, checked_first=4)
    for text in tictactoe_prompts(tokenizer, games=2):
        assert encoder.encode(text) == whole(odd, text)
    assert encoder.rule is None


def test_a_recheck_that_disagrees_turns_the_cache_off(tokenizer):
    encoder = PromptEncoder(tokenizer, checked_first=2, recheck_every=4)
    texts = tictactoe_prompts(tokenizer, games=2)
    for text in texts[:3]:
        encoder.encode(text)
    assert encoder.rule == "before-newlines"
    memo = encoder._candidates[0].memo
    line = next(iter(memo))
    memo[line] = ((1, 2, 3), memo[line][1])  # a wrong memo entry: the 4th prompt is rechecked
    assert encoder.encode(texts[3]) == whole(tokenizer, texts[3])
    assert encoder.rule is None and encoder.encode(texts[4]) == whole(tokenizer, texts[4])


def test_frames_are_taken_only_where_the_observation_enters_as_is(tokenizer):
    for template in (default_template, move_template):
        head, tail = template_frame(template, tokenizer)
        assert head + "OBS" + tail == template("OBS", tokenizer)
    assert template_frame(lambda obs, tok: f"<{obs}>", tokenizer) is None  # it does not declare a slot
    assert template_frame(default_template, MessagesTokenizer()) is None  # JSON escapes the observation

    class Collapsing:  # a chat template that rewrites its content: blank lines collapsed
        def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
            return "<s>" + messages[0]["content"].replace("\n\n", "\n") + "</s>"

    assert template_frame(default_template, Collapsing()) is None


def test_render_prompt_ids_are_the_whole_encoding(tokenizer):
    for text in tictactoe_prompts(tokenizer, games=3):
        observation = text.split("Observation: ", 1)[1].rsplit("\nReply with", 1)[0]
        assert render_prompt("default", observation, tokenizer) == whole(tokenizer, text)
