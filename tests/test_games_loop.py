"""play_game on real TextArena envs with a scripted (fake) generate, its failure paths, and a real model."""

import asyncio
import random
import re

import pytest
import textarena as ta

from unstable_core.errors import UnstableError
from unstable_core.games import InferenceUnavailable, play_game
from unstable_core.games.env_ops import InvalidMoveProbe, received_action
from unstable_core.inference.base import GenerationOutput, GenerationRequest, SamplingParams
from unstable_core.types import GameSpec, PlayerSpec, to_dict

PARAMS = SamplingParams(temperature=0.6, max_tokens=16)
TICTACTOE = "TicTacToe-v0-train"


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


class FakeGenerate:
    """A scripted `generate`: the i-th call answers replies[i] as real token ids of the tokenizer (plus
    EOS), with fake logprobs -0.1, -0.2, ... (one per token). A reply may be a GenerationOutput, an
    exception to raise, or "SLEEP" to hang. Records every request."""

    def __init__(self, tokenizer, replies):
        self.tokenizer, self.replies, self.requests = tokenizer, list(replies), []

    async def __call__(self, request: GenerationRequest) -> GenerationOutput:
        assert isinstance(request, GenerationRequest)
        reply = self.replies[len(self.requests)]
        self.requests.append(request)
        if reply == "SLEEP":
            await asyncio.sleep(30)
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, GenerationOutput):
            return reply
        ids = self.tokenizer.encode(reply, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return GenerationOutput(reply, ids, fake_logprobs(len(ids)), "stop")


def fake_logprobs(n):
    return [-0.1 * (i + 1) for i in range(n)]


def two_seats(template="qwen3-zs", collect=(True, False)):
    return [
        PlayerSpec(pid=0, model_uid="ckpt-3", collect_data=collect[0], prompt_template=template),
        PlayerSpec(pid=1, model_uid="opponent", collect_data=collect[1], prompt_template=template),
    ]


def play(tokenizer, replies, env_id=TICTACTOE, players=None, **kwargs):
    fake = FakeGenerate(tokenizer, replies)
    spec = GameSpec(game_idx=7, env_id=env_id, seed=11, players=players or two_seats())
    n = len(spec.players)
    kwargs.setdefault("lora_paths", {pid: (f"/ckpt/{pid}" if pid == 0 else None) for pid in range(n)})
    kwargs.setdefault("policy_versions", {pid: 3 - pid for pid in range(n)})
    result = asyncio.run(play_game(spec, fake, tokenizer, params=PARAMS, **kwargs))
    return result, fake


@pytest.mark.parametrize(
    "env_id, first, invalid",
    [(TICTACTOE, "\\boxed{4}", "\\boxed{4}"), ("KuhnPoker-v0-train", "\\boxed{check}", "\\boxed{fly}")],
)
def test_allowance_zero_an_invalid_move_ends_the_game_and_the_offender_loses(
    tokenizer, env_id, first, invalid
):
    result, fake = play(tokenizer, [first, invalid], env_id=env_id, error_allowance=0)
    assert len(fake.requests) == 2 and result.info.num_turns == 2
    offender = next(s.pid for t in result.trajectories for s in t.steps if s.invalid_move)
    other = 1 - offender
    assert result.info.final_rewards[offender] < result.info.final_rewards[other]
    assert result.info.invalid_move == {offender: True, other: False}


def test_allowance_one_gives_the_offender_a_retry(tokenizer):
    replies = ["\\boxed{4}", "\\boxed{4}", "\\boxed{0}"]
    result, fake = play(tokenizer, replies + ["\\boxed{1}", "\\boxed{2}", "\\boxed{7}"], error_allowance=1)
    assert [s.invalid_move for s in result.trajectories[1].steps][:2] == [True, False]
    assert result.info.final_rewards == {0: 1.0, 1: -1.0}  # the game went on to seat 0's column


def test_the_default_allowance_is_the_references_zero(tokenizer):
    result, fake = play(tokenizer, ["\\boxed{4}", "\\boxed{4}"])
    assert len(fake.requests) == 2 and result.info.final_rewards == {0: 1, 1: -1}


def two_player_train_envs():
    """(env id, env after reset) of every TextArena `-train` id that resets with two players."""
    import contextlib
    import io

    from textarena.envs.registration import ENV_REGISTRY

    for env_id in sorted(i for i in ENV_REGISTRY if i.endswith("-train")):
        try:  # some ids need more seats or data to download: not two-player games here
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                env = ta.make(env_id)
                env.reset(num_players=2, seed=0)
        except Exception:
            continue
        yield env_id, env


def test_allowance_zero_reaches_every_two_player_train_env():
    """The allowance is set on the state `reset` built, so it holds for every state class of TextArena."""
    from textarena.state import FFAMultiPlayerState, TwoPlayerState

    from unstable_core.games.env_ops import set_error_allowance

    checked = 0
    for env_id, env in two_player_train_envs():
        state = env.state
        assert hasattr(state, "error_allowance"), env_id
        set_error_allowance(env, 0)
        assert state.error_allowance == 0, env_id
        offender = state.current_player_id
        state.set_invalid_move("test")
        if isinstance(state, TwoPlayerState):  # the first invalid move ends the game; the offender loses
            assert state.done and state.rewards[offender] < state.rewards[1 - offender], env_id
        else:  # a free-for-all state eliminates the offender at once
            assert isinstance(state, FFAMultiPlayerState) and offender in state.elimination_order, env_id
        checked += 1
    assert checked >= 90  # TextArena 0.7.4 has 110 such ids


def test_tictactoe_to_the_end_with_an_invalid_retry(tokenizer):
    replies = [
        "Centre. \\boxed{4}",
        "I play [4]",  # no \boxed{}; cell 4 is taken: invalid, player 1 moves again
        "\\boxed{0}",
        "\\boxed{1}",
        "\\boxed{2}",
        "Column complete: \\boxed{7}",
    ]
    result, fake = play(tokenizer, replies, error_allowance=None)  # TextArena's own allowance: 1
    info = result.info
    assert not info.failed and info.error is None
    assert info.final_rewards == {0: 1.0, 1: -1.0}
    assert info.reason == "Player 0 has won!"
    assert info.num_turns == 6
    assert info.models == {0: "ckpt-3", 1: "opponent"}
    assert info.learner_pids == [0]
    assert info.invalid_move == {0: False, 1: True}
    assert info.format_rate == {0: 1.0, 1: pytest.approx(2 / 3)}
    assert (info.game_idx, info.env_id, info.seed) == (7, TICTACTOE, 11)

    steps = sorted((s for t in result.trajectories for s in t.steps), key=lambda s: s.turn)
    assert [s.pid for s in steps] == [0, 1, 1, 0, 1, 0]
    assert [s.turn for s in steps] == [0, 1, 2, 3, 4, 5]
    assert [s.invalid_move for s in steps] == [False, True, False, False, False, False]
    assert [s.format_ok for s in steps] == [True, False, True, True, True, True]
    assert [s.action for s in steps] == ["[4]", "I play [4]", "[0]", "[1]", "[2]", "[7]"]
    assert [s.act for s in steps] == replies
    for step, request in zip(steps, fake.requests, strict=True):
        assert tokenizer.decode(step.prompt_ids) == step.obs
        assert tuple(step.prompt_ids) == request.prompt_ids
        assert step.obs.startswith("<|im_start|>user\nYou are playing a two-player zero-sum game.")
        assert "Current Board:" in step.obs
        assert request.lora_path == ("/ckpt/0" if step.pid == 0 else None)
        assert request.params == PARAMS
        assert step.completion_ids[-1] == tokenizer.eos_token_id
        assert step.logprobs == fake_logprobs(len(step.completion_ids))
        assert step.policy_version == 3 - step.pid
        assert step.model_uid == ("ckpt-3" if step.pid == 0 else "opponent")
        assert step.game_idx == 7
        legal = step.step_info.pop("legal", None)  # TicTacToe's legal cells: on the learner's seat only
        assert (legal is not None) == (step.pid == 0)
        assert step.step_info == {
            "finish_reason": "stop",
            "seed": 11,
        }  # the game seed groups steps (group-relative)
    assert "Player 0 placed their symbol (O) in cell 4." in steps[1].obs

    p0, p1 = result.trajectories
    assert (p0.pid, p0.final_reward, p0.collect_data, p0.num_turns) == (0, 1.0, True, 3)
    assert (p1.pid, p1.final_reward, p1.collect_data, p1.num_turns) == (1, -1.0, False, 3)
    assert all(s.final_reward == s.reward == -1.0 for s in p1.steps)
    assert result.training_trajectories == [p0]


def test_second_invalid_move_loses_and_records_what_the_env_received(tokenizer):
    # "zero" has no brackets: the env's ActionFormattingWrapper turns it into "[zero]"
    result, _ = play(tokenizer, ["\\boxed{4}", "zero", "\\boxed{4}"], error_allowance=1)
    info = result.info
    assert not info.failed
    assert info.final_rewards == {0: 1.0, 1: -1.0}
    assert info.reason == "cell 4 is already occupied."
    steps = result.trajectories[1].steps
    assert [s.action for s in steps] == ["[zero]", "[4]"]
    assert [s.invalid_move for s in steps] == [True, True]
    assert [s.format_ok for s in steps] == [False, True]
    assert info.invalid_move == {0: False, 1: True}


def test_single_player_tower_of_hanoi(tokenizer):
    moves = ["C A", "A C", "A B", "C B", "A C", "B A", "B C", "A C"]  # the first is illegal (C is empty)
    seat = [PlayerSpec(pid=0, model_uid="ckpt-1", collect_data=True, prompt_template="qwen3-sp")]
    result, fake = play(
        tokenizer,
        [f"\\boxed{{{m}}}" for m in moves],
        env_id="TowerOfHanoi-v0-train",
        players=seat,
        error_allowance=None,  # TextArena's own allowance: the illegal first move is retried
    )
    info = result.info
    assert not info.failed
    assert info.final_rewards == {0: 1.0}
    assert info.reason == "Congratulations! You solved the Tower of Hanoi puzzle."
    steps = result.trajectories[0].steps
    assert [s.action for s in steps] == [f"[{m}]" for m in moves]
    assert [s.invalid_move for s in steps] == [True] + [False] * 7
    assert info.invalid_move == {0: True} and info.format_rate == {0: 1.0} and info.num_turns == 8
    assert all(tokenizer.decode(s.prompt_ids) == s.obs for s in steps)
    assert steps[0].obs.startswith("<|im_start|>user\nYou are playing a single-player game.")


def test_default_template_uses_the_chat_template(tokenizer):
    result, _ = play(
        tokenizer,
        ["\\boxed{0}", "\\boxed{3}", "\\boxed{1}", "\\boxed{4}", "\\boxed{2}"],
        players=two_seats(template="default"),
    )
    assert result.info.final_rewards == {0: 1.0, 1: -1.0}
    first = result.trajectories[0].steps[0]
    assert first.obs.startswith("<|im_start|>system\n")
    assert tokenizer.decode(first.prompt_ids) == first.obs


class ExplodingStep(ta.Wrapper):
    """A real TextArena env whose `step` raises on call number `at` (0-based)."""

    def __init__(self, env, at):
        super().__init__(env)
        self.at, self.calls = at, 0

    def step(self, action):
        self.calls += 1
        if self.calls > self.at:
            raise RuntimeError("board on fire")
        return self.env.step(action)


def test_env_raising_in_step_fails_the_game_and_keeps_partial_steps(tokenizer):
    factory = lambda env_id: ExplodingStep(ta.make(env_id), at=1)  # noqa: E731
    result, _ = play(tokenizer, ["\\boxed{4}", "\\boxed{0}"], env_factory=factory)
    info = result.info
    assert info.failed
    assert info.error == f"env {TICTACTOE} raised in step: RuntimeError: board on fire"
    assert info.final_rewards == {} and info.num_turns == 1
    assert [t.num_turns for t in result.trajectories] == [1, 0]
    assert result.trajectories[0].final_reward == 0.0


def test_unknown_env_and_raw_observations_fail_the_game(tokenizer):
    result, _ = play(tokenizer, [], env_id="NoSuchGame-v0")
    assert result.info.failed
    assert result.info.error.startswith(
        "env NoSuchGame-v0 raised in make: ValueError: Environment NoSuchGame-v0"
    )
    result, _ = play(tokenizer, [], env_id="TicTacToe-v0-raw")
    assert result.info.failed
    assert "gave a list observation, not text" in result.info.error


def test_error_output_fails_the_game(tokenizer):
    oom = GenerationOutput.failure("CUDA out of memory")
    result, _ = play(tokenizer, ["\\boxed{4}", oom])
    assert result.info.failed
    assert result.info.error == "generation for seat 1 failed: CUDA out of memory"
    assert result.info.num_turns == 1


def test_backend_exception_and_unpaired_logprobs_fail_the_game(tokenizer):
    result, _ = play(tokenizer, [ConnectionError("socket closed")])
    assert result.info.error == "generation for seat 0 raised ConnectionError: socket closed"
    bad = GenerationOutput("\\boxed{4}", [1, 2, 3], [-0.5], "stop")
    result, _ = play(tokenizer, [bad])
    assert result.info.error == "generation for seat 0 returned 1 logprobs for 3 tokens"


def test_timeout_fails_the_game(tokenizer):
    result, _ = play(tokenizer, ["\\boxed{4}", "\\boxed{0}", "SLEEP"], timeout_s=0.5)
    assert result.info.failed
    assert result.info.error == "game timed out after 0.5 s (turn 2)"
    assert [t.num_turns for t in result.trajectories] == [1, 1]
    assert result.info.duration_s == pytest.approx(0.5, abs=0.4)


def test_max_turns_fails_the_game(tokenizer):
    result, _ = play(tokenizer, ["\\boxed{4}", "\\boxed{0}", "\\boxed{8}"], max_turns=3)
    assert result.info.failed
    assert result.info.error.startswith("game did not finish within max_turns=3")
    assert result.info.num_turns == 3


def test_inference_unavailable_propagates(tokenizer):
    with pytest.raises(InferenceUnavailable, match="actor 2 died"):
        play(tokenizer, ["\\boxed{4}", InferenceUnavailable("actor 2 died")])


def test_cancellation_propagates(tokenizer):
    fake = FakeGenerate(tokenizer, ["SLEEP"])
    spec = GameSpec(game_idx=0, env_id=TICTACTOE, seed=0, players=two_seats())

    async def cancel_midway():
        task = asyncio.create_task(
            play_game(
                spec,
                fake,
                tokenizer,
                lora_paths={0: None, 1: None},
                policy_versions={0: 0, 1: 0},
                params=PARAMS,
                timeout_s=20,
            )
        )
        await asyncio.sleep(0.2)
        task.cancel()
        await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(cancel_midway())


def test_arguments_that_do_not_fit_the_spec_raise(tokenizer):
    with pytest.raises(UnstableError, match=r"lora_paths has no entry for seats \[1\]"):
        play(tokenizer, [], lora_paths={0: None})
    with pytest.raises(UnstableError, match="unknown prompt template 'nope'"):
        play(tokenizer, [], players=two_seats(template="nope"))
    with pytest.raises(UnstableError, match=r"seats must be numbered 0..n-1 once each, got \[0, 2\]"):
        play(tokenizer, [], players=[PlayerSpec(0, "a"), PlayerSpec(2, "b")])
    with pytest.raises(UnstableError, match="max_turns must be >= 1, got 0"):
        play(tokenizer, [], max_turns=0)
    with pytest.raises(UnstableError, match="timeout_s must be > 0 or None, got 0"):
        play(tokenizer, [], timeout_s=0)
    with pytest.raises(UnstableError, match="error_allowance must be an int >= 0 or None, got -1"):
        play(tokenizer, [], error_allowance=-1)


def test_invalid_move_probe_flags_only_illegal_moves():
    env = ta.make(TICTACTOE)
    env.reset(num_players=2, seed=0)
    probe = InvalidMoveProbe(env)
    assert probe.step(env, 0, "[4]") == (False, {}, False)
    assert probe.step(env, 1, "[4]") == (False, {}, True)  # occupied: retry allowed
    assert env.get_observation()[0] == 1
    assert probe.step(env, 1, "[0]") == (False, {}, False)
    assert probe.step(env, 0, "[9]") == (False, {}, True)
    assert probe.step(env, 0, "[0]") == (True, {}, True)  # second in a row: the game is lost
    assert env.close()[0] == {0: -1, 1: 1}


def test_received_action_applies_action_wrappers():
    env = ta.make(TICTACTOE)
    assert received_action(env, "4") == "[4]"
    assert received_action(env, "[4]") == "[4]"
    assert received_action(ta.make("TicTacToe-v0-raw"), "4") == "4"


def test_game_with_the_tiny_model_through_the_transformers_backend(tiny_model):
    hf = pytest.importorskip("unstable_core.inference.hf.backend")
    import torch

    torch.set_num_threads(1)
    params = SamplingParams(temperature=1.0, max_tokens=6, seed=0)

    async def main():
        backend = hf.TransformersBackend(tiny_model, max_batch_size=2, gather_ms=1.0, device="cpu")
        try:
            spec = GameSpec(game_idx=1, env_id=TICTACTOE, seed=3, players=two_seats(template="default"))
            return backend.tokenizer, await play_game(
                spec,
                backend.generate,
                backend.tokenizer,
                lora_paths={0: None, 1: None},
                policy_versions={0: 0, 1: 0},
                params=params,
                max_turns=40,
                error_allowance=None,  # TextArena's retry: at least two turns of the untrained model
            )
        finally:
            await backend.close()

    tok, result = asyncio.run(main())
    info = result.info
    assert not info.failed, info.error
    assert sorted(info.final_rewards) == [0, 1] and sum(info.final_rewards.values()) == 0
    steps = [s for t in result.trajectories for s in t.steps]
    assert len(steps) == info.num_turns >= 2
    for step in steps:
        assert tok.decode(step.prompt_ids) == step.obs
        assert 1 <= len(step.completion_ids) <= 6
        assert len(step.logprobs) == len(step.completion_ids)
        assert all(lp <= 0.0 for lp in step.logprobs)


class FlagOnlyEnv:
    """An env without TextArena's set_invalid_move, that flags a player's invalid move in game_info."""

    def __init__(self):
        self.state = type("State", (), {})()
        self.state.game_info = {0: {"invalid_move": False}}

    def step(self, action):
        if action == "bad":
            self.state.game_info[0]["invalid_move"] = True
        return action == "bad", {"note": action}


def test_invalid_move_probe_falls_back_to_the_game_info_flag():
    env = FlagOnlyEnv()
    probe = InvalidMoveProbe(env)
    assert probe.step(env, 0, "good") == (False, {"note": "good"}, False)
    assert probe.step(env, 0, "bad") == (True, {"note": "bad"}, True)
    assert probe.step(env, 0, "bad") == (True, {"note": "bad"}, False)  # already flagged: not this step


class ExtraInfo(ta.Wrapper):
    """A real TextArena env whose step info carries `extra`."""

    def __init__(self, env, extra):
        super().__init__(env)
        self.extra = extra

    def step(self, action):
        done, info = self.env.step(action)
        return done, {**info, **self.extra}


def test_env_step_info_is_kept_json_ready(tokenizer):
    replies = ["\\boxed{0}", "\\boxed{3}", "\\boxed{1}", "\\boxed{4}", "\\boxed{2}"]
    result, _ = play(tokenizer, replies, env_factory=lambda env_id: ExtraInfo(ta.make(env_id), {"score": 2}))
    result.trajectories[0].steps[0].step_info.pop("legal", None)
    assert result.trajectories[0].steps[0].step_info == {
        "finish_reason": "stop",
        "seed": 11,
        "env": {"score": 2},
    }
    result, _ = play(tokenizer, replies, env_factory=lambda env_id: ExtraInfo(ta.make(env_id), {"s": {1, 2}}))
    assert result.trajectories[0].steps[0].step_info["env"] == "{'s': {1, 2}}"


def test_seats_of_different_models_use_their_own_generate_and_tokenizer(tokenizer):
    """Seat 0 and seat 1 answer through different `generate`s (as two base models would)."""
    seat0 = FakeGenerate(tokenizer, ["\\boxed{4}", "\\boxed{0}", "\\boxed{8}"])
    seat1 = FakeGenerate(tokenizer, ["\\boxed{1}", "\\boxed{2}"])
    spec = GameSpec(game_idx=1, env_id=TICTACTOE, seed=11, players=two_seats())
    result = asyncio.run(
        play_game(
            spec,
            {0: seat0, 1: seat1},
            {0: tokenizer, 1: tokenizer},
            lora_paths={0: None, 1: None},
            policy_versions={0: 0, 1: -1},
            params=PARAMS,
        )
    )
    assert not result.info.failed
    assert (len(seat0.requests), len(seat1.requests)) == (3, 2)
    assert result.info.final_rewards == {0: 1, 1: -1}  # 4, 0, 8: the diagonal
    with pytest.raises(UnstableError, match="no entry for seat"):
        asyncio.run(
            play_game(
                spec,
                {0: seat0},
                tokenizer,
                lora_paths={0: None, 1: None},
                policy_versions={0: 0, 1: 0},
                params=PARAMS,
            )
        )


def test_the_move_template_opens_the_answer_and_the_action_is_read_from_prefix_and_completion(tokenizer):
    """`move` ends the prompt with `[` (the answer's start): the model writes `bet] ...`, the env gets `[bet]`;
    the step records the completion as sampled and the prefix in step_info; export gives the whole answer."""
    from unstable_core.report.export import _chat

    players = two_seats(template="move")
    result, fake = play(tokenizer, ["bet] because", "fold]"], env_id="KuhnPoker-v0-train", players=players)
    first = next(s for t in result.trajectories for s in t.steps if s.turn == 0)
    assert first.obs.endswith("<|im_start|>assistant\n[") and first.act == "bet] because"
    assert tokenizer.decode(first.prompt_ids) == first.obs  # the prefix is part of the prompt tokens
    assert (first.action, first.format_ok, first.invalid_move) == ("[bet]", True, False)
    assert first.step_info["answer_prefix"] == "["
    assert [r.params.stop for r in fake.requests] == [("]",), ("]",)]  # sampling stops at the move's end
    record = _chat(to_dict(first), {"game_idx": 7, "seat": first.pid})
    assert record["messages"][-1] == {"role": "assistant", "content": "[bet] because"}
    assert record["messages"][-2]["role"] == "user" and record["messages"][-2]["content"].endswith(
        "your move."
    )


def test_the_move_template_opens_nothing_for_an_api_seat():
    from unstable_core.games.templates import move_template
    from unstable_core.inference.chat_prompt import MessagesTokenizer, chat_messages

    prompt = move_template("Your move.", MessagesTokenizer())
    assert chat_messages(prompt) is not None and not prompt.endswith("[")


def listed_moves(prompt):
    """The bracketed moves of the prompt's last "available/valid moves/actions" line, else ConnectFour's."""
    lines = re.findall(r"(?:available|valid) (?:moves|actions)[^:\n]*:(.*)", prompt, re.IGNORECASE)
    return re.findall(r"\[[^\[\]\n]+\]", lines[-1]) if lines else [f"[col {c}]" for c in range(7)]


class RandomMoves:
    """A `generate` answering a random move listed in the prompt it decodes (bracket opened by `move`)."""

    def __init__(self, tokenizer, seed):
        self.tokenizer, self.rng, self.requests = tokenizer, random.Random(seed), []

    async def __call__(self, request):
        self.requests.append(request)
        prompt = self.tokenizer.decode(request.prompt_ids)
        move = self.rng.choice(listed_moves(prompt))
        text = move[1:] if prompt.endswith("[") else f"\\boxed{{{move}}}"
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return GenerationOutput(text, ids, fake_logprobs(len(ids)), "stop")


def recording_envs(observations):
    """An env factory whose envs append every observation they give to `observations`."""
    from unstable_core.games.env_ops import make_env

    def make(env_id):
        env = make_env(env_id)
        get = env.get_observation

        def get_observation():
            pid, observation = get()
            observations.append(observation)
            return pid, observation

        env.get_observation = get_observation
        return env

    return make


@pytest.mark.parametrize("template", ["default", "move", "qwen3-zs"])
def test_recorded_prompts_are_the_whole_encoding_over_whole_games(tiny_model, template):
    """Whole games of several envs: every step's prompt ids are `encode(template(observation))` and its text
    their decoding, though past the first prompts the encoder joins memoised lines (the cached path) and
    each seat renders with a renderer made once per game."""
    from transformers import AutoTokenizer

    from unstable_core.games.prompt_tokens import prompt_encoder
    from unstable_core.games.templates import get_template

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)  # its own encoder, fresh: whole, then cached
    render = get_template(template)
    for game, env_id in enumerate([TICTACTOE, "KuhnPoker-v0-train", "ConnectFour-v0-train"] * 4):
        observations: list[str] = []
        generate = RandomMoves(tokenizer, seed=game)
        spec = GameSpec(game_idx=game, env_id=env_id, seed=game, players=two_seats(template))
        result = asyncio.run(
            play_game(
                spec,
                generate,
                tokenizer,
                lora_paths={0: None, 1: None},
                policy_versions={0: 0, 1: 0},
                params=PARAMS,
                env_factory=recording_envs(observations),
                error_allowance=None,
            )
        )
        assert not result.info.failed, result.info.error
        steps = sorted((s for t in result.trajectories for s in t.steps), key=lambda s: s.turn)
        assert len(steps) == len(observations) == len(generate.requests)
        for step, observation, request in zip(steps, observations, generate.requests, strict=True):
            ids = tokenizer.encode(render(observation, tokenizer), add_special_tokens=False)
            assert step.prompt_ids == ids and list(request.prompt_ids) == ids
            assert step.obs == tokenizer.decode(ids)
    encoder = prompt_encoder(tokenizer)
    assert encoder.rule == "before-newlines" and encoder.prompts > 2 * encoder.checked_first
