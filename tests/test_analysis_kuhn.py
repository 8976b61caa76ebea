"""The Kuhn Poker exploitability probe against policies whose exploitability is known: uniform (11/24),
the Nash family (0), always bet or call (1/3, worked out by hand below); the 12 information sets reached in
real TextArena envs, their prompts exactly those of a real game; the tiny model end to end."""

import asyncio
import sys

import pytest

pytest.importorskip("pyspiel")

from unstable_core.errors import ConfigError  # noqa: E402
from unstable_core.eval.probes import run_probe  # noqa: E402
from unstable_core.games.analysis import kuhn, measure, uniform_policy  # noqa: E402

ENV = "KuhnPoker-v0-short-train"


def fixed(bets: dict[str, float], illegal: float = 0.0):
    """The policy that bets (or calls) with probability bets[key] at OpenSpiel's information set `key`,
    with `illegal` of its mass on no legal answer."""

    def policy(positions):
        out = []
        for p in positions:
            passing, betting = kuhn.MOVES[p.key[1:]]
            bet = bets[p.key]
            out.append({passing: (1 - bet) * (1 - illegal), betting: bet * (1 - illegal)})
        return out

    return policy


def nash(alpha: float) -> dict[str, float]:
    """Kuhn's Nash equilibria (Kuhn 1950): the first player bets J with alpha <= 1/3, never Q, K with 3 alpha;
    after check-bet folds J, calls Q with alpha + 1/3, calls K; the second bets J after a check with 1/3,
    never Q, always K; facing a bet folds J, calls Q with 1/3, calls K."""
    return {
        "0": alpha, "1": 0.0, "2": 3 * alpha, "0pb": 0.0, "1pb": alpha + 1 / 3, "2pb": 1.0,
        "0p": 1 / 3, "1p": 0.0, "2p": 1.0, "0b": 0.0, "1b": 1 / 3, "2b": 1.0,
    }  # fmt: skip


def test_uniform_play_is_eleven_twenty_fourths():
    result = measure(kuhn.NAME, uniform_policy, ENV)
    assert result.figures["exploitability"].value == pytest.approx(11 / 24, abs=1e-12)  # 0.458
    assert result.references["exploitability"] == {"uniform": pytest.approx(11 / 24), "nash": 0.0}
    assert result.figures["illegal_mass"].value == 0.0 and result.figures["exploitability"].n == 12


@pytest.mark.parametrize("alpha", [0.0, 1 / 6, 1 / 3])
def test_the_nash_family_is_unexploitable(alpha):
    assert measure(kuhn.NAME, fixed(nash(alpha)), ENV).figures["exploitability"].value == pytest.approx(
        0.0, abs=1e-12
    )


def test_always_bet_or_call_is_one_third():
    """Both players always bet or call: every hand is a showdown for 2, worth 0 to each. A best response of
    the second player calls with K (+2) and Q (0 on average) and folds J (-1): 1/3 a hand; one of the first
    player bets K (+2), plays Q for 0 either way, checks and folds J (-1): 1/3. Exploitability (the mean of
    the two gains) is 1/3; the illegal mass does not enter it (the legal answers are renormalised)."""
    result = measure(kuhn.NAME, fixed(dict.fromkeys(nash(0), 1.0), illegal=0.75), ENV)
    assert result.figures["exploitability"].value == pytest.approx(1 / 3, abs=1e-12)
    assert result.figures["illegal_mass"].value == pytest.approx(0.75)
    assert all(
        p["bet"] == pytest.approx(1.0) and p["legal_mass"] == pytest.approx(0.25) for p in result.positions
    )


def test_the_twelve_information_sets_are_reached_in_real_envs():
    """OpenSpiel's player 0 is TextArena's seat 1 (it opens round 1); each set shows its card, the moves
    before it and its legal answers; what the mover sees does not depend on the opponent's card."""
    positions = kuhn.positions(ENV)
    assert [p.key for p in positions] == [k for k, *_ in kuhn.information_sets()]
    assert sorted(p.key for p in positions) == sorted(_open_spiel_keys())
    for p in positions:
        card, history = kuhn.CARDS[int(p.key[0])], p.key[1:]
        assert p.pid == (1 if len(history) % 2 == 0 else 0)
        assert f"Your card is: '{card}'" in p.observation
        assert p.observation.count("submitted move") == len(history)
        assert set(p.answers) == set(kuhn.MOVES[history])
        assert p.answers["[fold]" if "b" in history else "[check]"][1] in ("[Fold]", "[Check]")
        other = max(c for c in range(3) if c != int(p.key[0]))
        again = kuhn.reach(ENV, int(p.key[0]), 0 if p.pid == 1 else 1, history, other=other)
        assert (
            again.observation == p.observation
            and again.env.state.game_state["player_cards"][1 - p.pid] == other
        )


def _open_spiel_keys():
    import pyspiel
    from open_spiel.python import policy

    return list(policy.TabularPolicy(pyspiel.load_game("kuhn_poker")).state_lookup)


def test_the_prompts_are_those_of_a_real_game(tiny_model):
    """A real game (the game loop, its renderer and wrappers) dealt the card of a set and played along its
    history records the exact prompt ids the probe scores there."""
    from unstable_core.games.analysis.model_policy import ModelPolicy, load_model
    from unstable_core.games.loop import play_game
    from unstable_core.games.templates import answer_prompt
    from unstable_core.inference.base import GenerationOutput, SamplingParams
    from unstable_core.types import GameSpec, PlayerSpec

    model, tokenizer = load_model(tiny_model, device="cpu")
    policy = ModelPolicy(model, tokenizer, answer_prompt("move", tokenizer))
    target = kuhn.reach(ENV, 2, 1, "b")  # the second player (seat 0) holds K and faces a bet
    seed = kuhn.deal_seed(ENV, 0, 2, 0)
    prompts = []

    async def generate(request):
        prompts.append(list(request.prompt_ids))
        text = "bet]" if len(prompts) == 1 else "fold]"
        return GenerationOutput(text=text, token_ids=[1], logprobs=[0.0], finish_reason="stop")

    spec = GameSpec(0, ENV, seed, [PlayerSpec(pid, str(pid), prompt_template="move") for pid in (0, 1)])
    result = asyncio.run(
        play_game(spec, generate, tokenizer, lora_paths={0: None, 1: None}, policy_versions={0: 0, 1: 0},
                  params=SamplingParams(), error_allowance=None)
    )  # fmt: skip
    assert not result.info.failed, result.info.error
    assert prompts[1] == policy.render(target.observation)[1]


def test_the_tiny_model_end_to_end(tiny_model):
    """Through `run_probe`, the path `unstable eval --probe` and the default model take: valid
    probabilities, whatever the random weights make of them."""
    result = run_probe(kuhn.NAME, tiny_model, env_id=ENV)
    figures = result.figures
    assert 0.0 <= figures["exploitability"].value <= 11 / 6 and 0.0 <= figures["illegal_mass"].value <= 1.0
    for p in result.positions:
        assert all(0.0 <= v <= 1.0 for v in p["probabilities"].values())
        assert p["legal_mass"] == pytest.approx(sum(p["probabilities"].values()))
        assert 0.0 <= p["bet"] <= 1.0
    assert result.to_dict()["figures"]["exploitability"]["n"] == 12 and result.wall_s > 0


def test_without_open_spiel_the_probe_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyspiel", None)
    with pytest.raises(ConfigError, match="pip install open-spiel") as err:
        measure(kuhn.NAME, uniform_policy, ENV)
    assert "\n" not in str(err.value)
