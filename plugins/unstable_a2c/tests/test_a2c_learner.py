"""A2C: GAE by hand, episode rewards, the critic's read position, adapter isolation, critic learning,
one shared backbone, checkpoints, options."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from unstable_a2c.gae import compute_gae, group_episodes, outcome_rewards, shaped_advantages  # noqa: E402
from unstable_a2c.learner import CRITIC_ADAPTER, A2CLearner, normalize  # noqa: E402

from unstable_core.errors import ConfigError, UnstableError  # noqa: E402
from unstable_core.types import Step  # noqa: E402

torch.set_num_threads(1)


def step(game, pid, turn, prompt, completion, reward, final) -> Step:
    return Step(
        pid=pid,
        env_id="t",
        obs="",
        act="",
        prompt_ids=prompt,
        completion_ids=completion,
        reward=reward,
        final_reward=final,
        shaping=reward - final,
        game_idx=game,
        turn=turn,
    )


# game 0: player 0 plays turns 0, 2, 4 (shaping +0.2, -0.1, 0; outcome +1); player 1 turns 1, 3 (outcome -1)
BATCH = [
    step(0, 0, 4, [1, 2, 3, 4, 5, 6], [7, 8], reward=1.0, final=1.0),
    step(0, 1, 1, [1, 2, 3], [9], reward=-1.0, final=-1.0),
    step(0, 0, 0, [1, 2], [3, 4, 5], reward=1.2, final=1.0),
    step(0, 1, 3, [1, 2, 3, 4, 5], [10, 11], reward=-1.0, final=-1.0),
    step(0, 0, 2, [1, 2, 3, 4], [12], reward=0.9, final=1.0),
]


@pytest.fixture
def learner(tiny_model, tmp_path):
    lrn = A2CLearner.create(
        tiny_model, device="cpu", run_dir=tmp_path / "run", lora_config={"lora_rank": 4}, mini_batch_size=2
    )
    lrn.initialize_algorithm(gamma=1.0, gae_lambda=0.5, critic_learning_rate=1e-2, normalize_adv=False)
    return lrn


def randomize_lora(lrn, adapter, seed=0):
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, param in lrn.model.named_parameters():
            if "lora_B" in name and f".{adapter}." in name:
                param.normal_(0, 0.2)


def test_compute_gae_by_hand():
    advantages, returns = compute_gae([0.0, 0.0, 1.0], [0.5, 0.6, 0.7], gamma=0.9, lam=0.8)
    # t=2: delta = 1 - 0.7 = 0.3                      A = 0.3
    # t=1: delta = 0.9*0.7 - 0.6 = 0.03               A = 0.03 + 0.72*0.3   = 0.246
    # t=0: delta = 0.9*0.6 - 0.5 = 0.04               A = 0.04 + 0.72*0.246 = 0.21712
    assert advantages == pytest.approx([0.21712, 0.246, 0.3])
    assert returns == pytest.approx([0.71712, 0.846, 1.0])
    # gamma = lambda = 1 with V = 0: reward-to-go
    assert compute_gae([1.0, 2.0, 3.0], [0.0, 0.0, 0.0], 1.0, 1.0)[0] == pytest.approx([6.0, 5.0, 3.0])
    with pytest.raises(UnstableError, match="one value per step"):
        compute_gae([1.0], [0.0, 0.0], 1.0, 1.0)


def test_outcome_rewards_put_the_outcome_on_the_last_step_and_shaping_stays_on_its_step():
    episodes = group_episodes(BATCH)
    assert [[s.turn for s in ep] for ep in episodes] == [[0, 2, 4], [1, 3]]
    assert outcome_rewards(episodes[0]) == pytest.approx([0.0, 0.0, 1.0])
    assert outcome_rewards(episodes[1]) == pytest.approx([0.0, -1.0])
    assert shaped_advantages([1.0, 1.0, 1.0], episodes[0]) == pytest.approx([1.2, 0.9, 1.0])


def _game(idx, outcome, turns):
    from unstable_core.types import GameInformation, GameResult, Trajectory

    steps = [
        Step(pid=0, env_id="E", obs="", act="", game_idx=idx, turn=t, prompt_ids=[1], completion_ids=[2])
        for t in range(turns)
    ]
    traj = Trajectory(pid=0, env_id="E", model_uid="m", steps=steps, collect_data=True)
    info = GameInformation(game_idx=idx, env_id="E", final_rewards={0: outcome}, learner_pids=[0])
    return GameResult(info=info, trajectories=[traj])


def test_returns_of_a_won_game_survive_the_sampling_transform():
    """A won and a lost 5-turn game with +0.5 shaping per turn: returns (gamma = lambda = 1, V = 0) are the
    outcome at every turn, whatever the batch normalisation did to `reward`; the shaping is each step's own."""
    rewards = pytest.importorskip("unstable_rewards")
    from unstable_core.runtime.actors.buffer import EpisodeBuffer

    buf = EpisodeBuffer(
        100,
        step_transforms=[rewards.RewardForFormat(reward=0.5, penalty=0.0)],
        sampling_transforms=[rewards.NormalizeRewardsByEnv(z_score=True)],
    )
    buf.add_result(_game(0, 1.0, 5))
    buf.add_result(_game(1, -1.0, 5))
    batch = buf.get_batch(10)
    for idx, outcome in ((0, 1.0), (1, -1.0)):
        episode = [s for s in batch if s.game_idx == idx]
        advantages, returns = compute_gae(outcome_rewards(episode), [0.0] * 5, gamma=1.0, lam=1.0)
        assert returns == pytest.approx([outcome] * 5)
        assert shaped_advantages(advantages, episode) == pytest.approx([outcome + 0.5] * 5)


@pytest.mark.parametrize("lam", [1.0, 0.95])
def test_a_win_has_a_larger_advantage_than_a_loss_of_any_length(tiny_model, tmp_path, lam):
    """With `unstable run`'s default transforms (+1.5 format, +1 valid move per step), the first move of a
    3-move win is worth more than the first move of a 5-move loss (before the fix: 8.5 against 11.5 with
    lambda = 1, 8.03 against 10.50 with 0.95: a2c was paid to prolong games); the critic's targets are the
    outcomes, whatever the length."""
    from unstable_core.runtime.actors.buffer import EpisodeBuffer
    from unstable_core.testing import run_default_transforms

    transforms = run_default_transforms()
    transforms["sampling_transforms"] = []
    buf = EpisodeBuffer(100, **transforms)
    win, loss = _game(0, 1.0, 3), _game(1, -1.0, 5)
    for result in (win, loss):
        for s in result.trajectories[0].steps:
            s.format_ok = True
        buf.add_result(result)
    lrn = A2CLearner.create(tiny_model, device="cpu", run_dir=tmp_path / "run", lora_config={"lora_rank": 4})
    lrn.initialize_algorithm(gae_lambda=lam, normalize_adv=False)  # V = 0: the value head starts at zero
    samples = lrn.prepare_batch(buf.get_batch(8))
    first = {s.step.game_idx: s for s in samples if s.step.turn == 0}
    assert first[0].advantage > first[1].advantage
    for idx, turns in ((0, 3), (1, 5)):  # GAE of the outcome alone (V = 0), plus this step's own shaping
        outcome = first[idx].step.final_reward  # +-1 less the role baseline (tau = 0.001)
        assert first[idx].advantage == pytest.approx(lam ** (turns - 1) * outcome + 2.5, abs=1e-4)
    for s in samples:  # the critic learns the outcome's value (lambda-returns of the outcome alone)
        turns_left = (3 if s.step.game_idx == 0 else 5) - 1 - s.step.turn
        assert s.ret == pytest.approx(lam**turns_left * s.step.final_reward, abs=1e-4)


def test_advantages_are_normalised_per_env(tiny_model, tmp_path):
    lrn = A2CLearner.create(tiny_model, device="cpu", run_dir=tmp_path / "run", lora_config={"lora_rank": 4})
    lrn.initialize_algorithm()
    assert lrn.a2c.normalize_adv and lrn.a2c.critic_learning_rate == 5e-5
    batch = [
        Step(
            pid=0,
            env_id=env,
            obs="",
            act="",
            prompt_ids=[1, 2],
            completion_ids=[3],
            final_reward=r,
            game_idx=g,
        )
        for g, (env, r) in enumerate([("A", 1.0), ("A", -1.0), ("B", 100.0), ("B", 50.0), ("B", 0.0)])
    ]
    samples = lrn.prepare_batch(batch)
    for env in ("A", "B"):
        adv = [s.advantage for s in samples if s.step.env_id == env]
        assert sum(adv) == pytest.approx(0.0, abs=1e-6)
        assert (sum(a * a for a in adv) / len(adv)) ** 0.5 == pytest.approx(1.0, abs=1e-4)


def test_group_episodes_rejects_steps_without_a_game_or_with_repeated_turns():
    with pytest.raises(UnstableError, match="game_idx"):
        group_episodes([step(-1, 0, 0, [1], [2], 0.0, 0.0)])
    with pytest.raises(UnstableError, match="same turn"):
        group_episodes([step(0, 0, 1, [1], [2], 0.0, 0.0), step(0, 0, 1, [1], [3], 0.0, 0.0)])


def test_normalize_is_guarded_against_zero_std():
    assert normalize([2.0, 2.0, 2.0]) == [0.0, 0.0, 0.0]
    assert normalize([1.0, 3.0]) == pytest.approx([-1.0, 1.0])


def test_prepare_batch_gives_gae_of_the_episode(learner):
    samples = learner.prepare_batch(list(BATCH))  # zero value head: V = 0 everywhere
    by_turn = {(s.step.pid, s.step.turn): s for s in samples}
    # player 0, outcome rewards [0, 0, 1], gamma 1, lambda 0.5: GAE A4 = 1.0, A2 = 0.5, A0 = 0.25, returns
    # the same (V = 0); each advantage then gets its own step's shaping [0.2, -0.1, 0]
    assert [by_turn[(0, t)].advantage for t in (0, 2, 4)] == pytest.approx([0.45, 0.4, 1.0])
    assert [by_turn[(0, t)].ret for t in (0, 2, 4)] == pytest.approx([0.25, 0.5, 1.0])
    # player 1, rewards [0, -1]: A3 = -1, A1 = 0 + 0.5 * -1 = -0.5
    assert [by_turn[(1, t)].advantage for t in (1, 3)] == pytest.approx([-0.5, -1.0])
    assert [by_turn[(1, t)].ret for t in (1, 3)] == pytest.approx([-0.5, -1.0])


def test_value_is_read_at_the_last_prompt_token(learner):
    randomize_lora(learner, CRITIC_ADAPTER)
    torch.nn.init.normal_(learner.value_head.weight, 0, 1.0)
    a = step(0, 0, 0, [1, 2, 3], [4, 5], 0.0, 0.0)
    b = step(0, 0, 0, [1, 2, 3], [9, 9, 9, 9], 0.0, 0.0)  # same state, other action
    c = step(0, 0, 0, [1, 2, 7], [4, 5], 0.0, 0.0)  # other last prompt token
    with torch.no_grad(), learner.use_adapter(CRITIC_ADAPTER):
        values = learner.critic_values(learner.collate([a, b, c]))
        # by hand: the critic's final hidden state at position 2 of the unpadded prompt, through the head
        out = learner.model(input_ids=torch.tensor([[1, 2, 3]]), output_hidden_states=True)
        by_hand = learner.value_head(out.hidden_states[-1][0, 2]).item()
    assert values[0].item() == pytest.approx(by_hand, rel=1e-4, abs=1e-6)
    assert values[0].item() == pytest.approx(values[1].item(), abs=1e-6)
    assert values[0].item() != pytest.approx(values[2].item(), abs=1e-4)


def test_policy_and_critic_forwards_use_only_their_own_adapter(learner):
    tokens = learner.collate(BATCH)
    torch.nn.init.normal_(learner.value_head.weight, 0, 1.0)
    with torch.no_grad():
        logits0 = learner.policy_logits(tokens)
        with learner.use_adapter(CRITIC_ADAPTER):
            values0 = learner.critic_values(tokens)
        randomize_lora(learner, CRITIC_ADAPTER)
        assert torch.equal(learner.policy_logits(tokens), logits0)
        with learner.use_adapter(CRITIC_ADAPTER):
            values1 = learner.critic_values(tokens)
        assert not torch.allclose(values1, values0)
        randomize_lora(learner, "default", seed=1)
        assert not torch.allclose(learner.policy_logits(tokens), logits0)
        with learner.use_adapter(CRITIC_ADAPTER):
            assert torch.equal(learner.critic_values(tokens), values1)


def test_updates_train_both_adapters_and_the_head_and_nothing_else(learner):
    before = {n: p.detach().clone() for n, p in learner.model.named_parameters()}
    head_before = learner.value_head.weight.detach().clone()
    for _ in range(2):  # the critic LoRA gets gradient once the zero-initialised head has moved
        metrics = learner.update(BATCH)
    changed = {n for n, p in learner.model.named_parameters() if not torch.equal(p, before[n])}
    assert any(".default." in n for n in changed) and any(f".{CRITIC_ADAPTER}." in n for n in changed)
    assert all("lora_" in n for n in changed)
    assert not torch.equal(learner.value_head.weight, head_before)
    assert learner.step == 2 and metrics["grad_norm"] > 0 and metrics["grad_norm/critic"] > 0


def test_critic_updates_lower_the_value_loss(tiny_model, tmp_path):
    lrn = A2CLearner.create(
        tiny_model, device="cpu", run_dir=tmp_path, lora_config={"lora_rank": 4}, gradient_clipping=1.0
    )
    # lambda = 1: Monte-Carlo returns, a fixed target on a fixed batch
    lrn.initialize_algorithm(gamma=1.0, gae_lambda=1.0, critic_learning_rate=3e-3)
    losses = [lrn.update(BATCH)["value_loss"] for _ in range(8)]
    assert losses[-1] < 0.5 * losses[0]


def test_one_backbone_only(learner, tiny_model):
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    n_base = sum(p.numel() for p in base.parameters())
    n_frozen = sum(p.numel() for n, p in learner.model.named_parameters() if "lora_" not in n)
    assert n_frozen == n_base


def test_checkpoint_layout_and_reload(learner, tiny_model, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    learner.update(BATCH)
    learner.update(BATCH)
    path = learner.save_checkpoint()
    names = {os.path.relpath(os.path.join(r, f), path) for r, _, fs in os.walk(path) for f in fs}
    assert {
        "adapter_model.safetensors",
        "adapter_config.json",
        "optimizer.safetensors",
        "learner_state.json",
    } <= names
    assert {"critic/adapter_model.safetensors", "critic/value_head.safetensors"} <= names
    assert all(n.endswith((".json", ".safetensors", ".md")) for n in names), names

    fresh = A2CLearner.create(
        tiny_model, device="cpu", run_dir=tmp_path / "fresh", lora_config={"lora_rank": 4}, mini_batch_size=2
    )
    fresh.initialize_algorithm(gamma=1.0, gae_lambda=0.5, critic_learning_rate=1e-2)
    fresh.load_checkpoint(path)
    tokens = learner.collate(BATCH)
    with torch.no_grad():
        assert torch.equal(fresh.policy_logits(tokens), learner.policy_logits(tokens))
        with learner.use_adapter(CRITIC_ADAPTER), fresh.use_adapter(CRITIC_ADAPTER):
            assert torch.equal(fresh.critic_values(tokens), learner.critic_values(tokens))
        # the root adapter is the policy: what an inference backend loads
        plain = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), str(path)).eval()
        got = plain(input_ids=tokens.input_ids, attention_mask=tokens.attention_mask).logits
        assert torch.allclose(got, learner.policy_logits(tokens), atol=1e-5)
    assert fresh.step == 2
    m1, m2 = learner.update(BATCH), fresh.update(BATCH)
    assert m1["value_loss"] == pytest.approx(m2["value_loss"], rel=1e-5)


def test_options_are_checked(tiny_model, tmp_path):
    lrn = A2CLearner.create(tiny_model, device="cpu", run_dir=tmp_path, lora_config={"lora_rank": 4})
    with pytest.raises(UnstableError, match=r"unknown a2c option\(s\) lamda; allowed: gamma, gae_lambda"):
        lrn.initialize_algorithm(lamda=0.9)
    with pytest.raises(ConfigError, match="gamma must be a number in"):
        lrn.initialize_algorithm(gamma=1.5)
    lrn.initialize_algorithm(normalize_adv=True)
    with pytest.raises(UnstableError, match="already called"):
        lrn.initialize_algorithm()
    samples = lrn.prepare_batch(list(BATCH))
    advantages = [s.advantage for s in samples]
    assert sum(advantages) == pytest.approx(0.0, abs=1e-6)
    assert sum(a * a for a in advantages) / len(advantages) == pytest.approx(1.0, rel=1e-5)


def test_plugin_registers_a2c():
    from unstable_core import plugins

    component = plugins.get_registry().get("learner", "a2c")
    assert component.dist == "unstable-a2c" and component.load() is A2CLearner
    assert A2CLearner.buffer_kind == "episode"
