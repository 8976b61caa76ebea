"""Legal answers recorded on the steps a model plays, and branching's values of the answers not played:
real TextArena games (Kuhn Poker, TicTacToe) through `play_game`; the mover's turns come from a rule
written as a generate function (the inference boundary), the opponent from a scripted player."""

from __future__ import annotations

import asyncio
import random

import pytest

from unstable_core.errors import UnstableError
from unstable_core.games.branching import Branching
from unstable_core.games.legal_answers import scored_envs
from unstable_core.games.loop import play_game
from unstable_core.games.players.base import ScriptedPlayer
from unstable_core.inference.base import GenerationOutput, SamplingParams
from unstable_core.probes.kuhn_exploitability import OPENING_SEAT, deal_seed
from unstable_core.types import LEGAL, GameSpec, PlayerSpec

KUHN = "KuhnPoker-v0-chips"
MOVER = 1 - OPENING_SEAT  # answers the opening seat's move
J, Q, K = range(3)


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from unstable_core.model_loading import load_tokenizer

    return load_tokenizer(tiny_model)


def answering(tokenizer, text):
    """A model seat's generate that always answers `text` (after the template's `[`)."""

    async def generate(request):
        ids = list(tokenizer.encode(text, add_special_tokens=False))
        return GenerationOutput(text=text, token_ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop")

    return generate


class BluffingOpener(ScriptedPlayer):
    """Kuhn's opening seat: bets with K, with J half the time (its own seeded draws), checks with Q."""

    def __init__(self, seed=0):
        self.rng = random.Random(f"opener:{seed}")  # not the stream the env deals from with the same seed

    def move(self, env, observation):
        card = env.state.game_state["player_cards"][env.state.current_player_id]
        bets = card == K or (card == J and self.rng.random() < 0.5)
        return "[bet]" if bets else "[check]"


def play(spec, tokenizer, opener, mover_text, template="kuhn-compact", branch_samples=0, seed=7):
    seats = {MOVER: answering(tokenizer, mover_text), 1 - MOVER: opener}
    return asyncio.run(
        play_game(
            spec, seats, tokenizer, lora_paths=dict.fromkeys(seats), policy_versions=dict.fromkeys(seats, 0),
            params=SamplingParams(seed=seed), branching=Branching(branch_samples),
        )
    )  # fmt: skip


def kuhn_spec(seed, template="kuhn-compact"):
    return GameSpec(
        game_idx=seed, env_id=KUHN, seed=seed,
        players=[
            PlayerSpec(pid=MOVER, model_uid="ckpt", collect_data=True, prompt_template=template),
            PlayerSpec(pid=1 - MOVER, model_uid="opener", prompt_template=template),
        ] if MOVER == 0 else [
            PlayerSpec(pid=0, model_uid="opener", prompt_template=template),
            PlayerSpec(pid=1, model_uid="ckpt", collect_data=True, prompt_template=template),
        ],
    )  # fmt: skip


def mover_steps(result):
    return [s for t in result.trajectories if t.collect_data for s in t.steps]


def test_a_model_step_records_its_legal_answers(tokenizer):
    seed = deal_seed(KUHN, OPENING_SEAT, K, Q)  # the opener bets with K
    result = play(kuhn_spec(seed), tokenizer, BluffingOpener(), "call]")
    (step,) = mover_steps(result)
    legal = step.step_info[LEGAL]
    assert legal["moves"] == ["[fold]", "[call]"] and legal["played"] == 1
    for move, ids in zip(legal["moves"], legal["ids"], strict=True):  # the text after `[`, then `]`
        assert tokenizer.decode(ids) == move[1:]
    assert "values" not in legal
    opener = [s for t in result.trajectories if not t.collect_data for s in t.steps]
    assert opener and all(LEGAL not in s.step_info for s in opener)  # scripted seats record none


def test_an_illegal_answer_is_recorded_as_none_played(tokenizer):
    seed = deal_seed(KUHN, OPENING_SEAT, K, Q)
    (step,) = mover_steps(play(kuhn_spec(seed), tokenizer, BluffingOpener(), "raise]"))
    assert step.step_info[LEGAL]["played"] == -1


def test_which_envs_are_scored():
    assert scored_envs(["TicTacToe-v0-train", KUHN, "GuessTheLetter-v0"]) == (
        ["TicTacToe-v0-train", KUHN],
        ["GuessTheLetter-v0"],
    )


def test_branching_values_each_move_reproducibly(tokenizer):
    seed = deal_seed(KUHN, OPENING_SEAT, K, Q)  # Q facing K's bet: fold loses the ante, a call loses 2
    first = play(kuhn_spec(seed), tokenizer, BluffingOpener(), "call]", branch_samples=3)
    legal = mover_steps(first)[0].step_info[LEGAL]
    assert legal["values"] == [-1.0, -2.0] and legal["k"] == 3
    assert legal["cost"]["turns"] == 0  # both moves end the hand: nothing left to play
    again = play(kuhn_spec(seed), tokenizer, BluffingOpener(), "call]", branch_samples=3)
    assert mover_steps(again)[0].step_info[LEGAL]["values"] == legal["values"]


def tictactoe_game(tokenizer, branching=None):
    """TicTacToe: X plays 1, 3, 5; O (the model seat) 4 then 0, and then holds 0 and 4 with 8 open."""
    env_id = "TicTacToe-v0-train"

    class Script(ScriptedPlayer):  # X: the first empty cell of 1, 3, 5, 7, 2, 6, else any
        def move(self, env, observation):
            board = [c for row in env.state.game_state["board"] for c in row]
            empty = [i for i in (1, 3, 5, 7, 2, 6) if not board[i]] or [i for i in range(9) if not board[i]]
            return f"[{empty[0]}]"

    seats = {0: Script(), 1: answering_sequence(tokenizer, ["4]", "0]", "8]"])}
    spec = GameSpec(
        game_idx=0, env_id=env_id, seed=0,
        players=[PlayerSpec(pid=0, model_uid="x", prompt_template="move"),
                 PlayerSpec(pid=1, model_uid="ckpt", collect_data=True, prompt_template="move")],
    )  # fmt: skip
    result = asyncio.run(
        play_game(
            spec, seats, tokenizer, lora_paths=dict.fromkeys(seats), policy_versions=dict.fromkeys(seats, 0),
            params=SamplingParams(seed=1), branching=branching,
        )
    )  # fmt: skip
    assert not result.info.failed, result.info.error
    return [s.step_info[LEGAL] for s in mover_steps(result)]


def test_a_winning_move_is_worth_one_whatever_follows(tokenizer):
    """O's third state: playing 8 wins at once, so its value is 1 whatever the continuations."""
    last = tictactoe_game(tokenizer, Branching(samples=2))[-1]
    assert last["values"][last["moves"].index("[8]")] == 1.0


def test_branch_max_moves_leaves_the_states_of_more_moves_unbranched(tokenizer):
    legal = tictactoe_game(tokenizer, Branching(samples=1, max_moves=6))
    assert [len(x["moves"]) for x in legal] == [8, 6, 4]
    assert ["values" in x for x in legal] == [False, True, True]
    assert legal[-1]["values"][legal[-1]["moves"].index("[8]")] == 1.0
    with pytest.raises(UnstableError, match="branch_max_moves must be an int >= 0, got -1"):
        Branching(samples=1, max_moves=-1)


def test_a_discount_and_a_horizon_value_a_win_now_above_a_win_later(tokenizer):
    """O's last state: 8 wins at once; 2, 6 or 7 let X answer and O win with 8 a turn later."""
    later = tictactoe_game(tokenizer, Branching(samples=1, discount=0.5))[-1]
    assert later["moves"] == ["[2]", "[6]", "[7]", "[8]"]
    assert later["values"] == [0.25, 0.25, 0.25, 1.0]  # 0.5 ** 2: X's turn, then O's winning one
    assert (later["cost"]["turns"], later["cost"]["generated"]) == (6, 3)  # O's turns are the model's
    cut = tictactoe_game(tokenizer, Branching(samples=1, depth=1))[-1]
    assert cut["values"] == [0.0, 0.0, 0.0, 1.0]  # cut after X's answer, unfinished: worth 0
    assert (cut["cost"]["turns"], cut["cost"]["generated"]) == (3, 0)  # X's answers: no inference
    for bad, match in (
        ({"depth": -1}, "branch_depth must be an int >= 0, got -1"),
        ({"discount": 0.0}, r"branch_discount must be a number in \(0, 1\], got 0.0"),
        ({"discount": 1.5}, r"branch_discount must be a number in \(0, 1\], got 1.5"),
    ):
        with pytest.raises(UnstableError, match=match):
            Branching(samples=1, **bad)


def answering_sequence(tokenizer, texts):
    """A model seat that answers `texts` in turn, then the last one again."""
    state = {"i": 0}

    async def generate(request):
        text = texts[min(state["i"], len(texts) - 1)]
        state["i"] += 1
        ids = list(tokenizer.encode(text, add_special_tokens=False))
        return GenerationOutput(text=text, token_ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop")

    return generate


def exact_call_value():
    """The value of calling with Q facing a bet under BluffingOpener, by enumerating the deals weighted by
    the opener's probability of betting with its card (its reach): K bets always, J half the time."""
    from unstable_core.games.env_ops import make_env

    total = weight = 0.0
    for card, p_bet in ((J, 0.5), (K, 1.0)):
        env = make_env(KUHN)
        env.reset(num_players=2, seed=deal_seed(KUHN, OPENING_SEAT, card, Q))
        env.step("[bet]")
        env.step("[call]")
        rewards, _ = env.close()
        total += p_bet * rewards[MOVER]
        weight += p_bet
    return total / weight  # (0.5 * 2 + 1 * -2) / 1.5 = -2/3; uniform deals would say 0


def test_branched_values_are_unbiased_at_the_movers_information_set(tokenizer):
    exact = exact_call_value()
    assert exact == pytest.approx(-2 / 3)
    values = []
    for game in range(400):  # every deal; the mover's set "Q facing a bet" when the opener bet
        result = play(kuhn_spec(game), tokenizer, BluffingOpener(seed=game), "call]", branch_samples=1)
        for step in mover_steps(result):
            legal = step.step_info[LEGAL]
            if "Your card: Q" in step.obs and legal["moves"] == ["[fold]", "[call]"]:
                values.append(legal["values"][1])
    n = len(values)
    mean = sum(values) / n
    sd = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    assert n > 60
    assert abs(mean - exact) < 3 * sd / n**0.5 + 1e-9, (mean, exact, n)
    assert abs(mean - 0.0) > 3 * sd / n**0.5  # the uniform-deal value is rejected
