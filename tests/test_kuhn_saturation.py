"""The saturation of policy gradient on Kuhn Poker's 12 first-round sets, on the real learner path.

A one-layer model reads the prompts (kuhn-compact, the real env driven to each set) with a strong shared
feature and a weak card feature (`make_kuhn_model`). Trained first to bet and call with every card (the
strategy recipe's card-blind point, q >= 0.99 everywhere), each signal then gets the card-dependent target
through the learner's own `update`, 150 times (NeuRD 250: see NEURD_UPDATES): sampled policy gradient
(REINFORCE on a sampled answer, +1 if it is the target, -1 if not) mostly stays card-blind at the sets where
the target is the minority answer, while NeuRD and MMD, which score every legal answer, reach it at all 12.

REINFORCE's outcome depends on its draws: over sampling seeds 0-7, 1 reached q(target) >= 0.9 at all 12
sets; K's bet was learnt in 4, J's fold facing a bet in 1 (the exact gradient lowers it: calling is right
for Q and K), and 4 left all four minority sets below 0.6. So the test runs 4 seeds and asks that at most
2 reach the target (1 today); NeuRD and MMD draw nothing.
"""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")

from peft import get_peft_model_state_dict, set_peft_model_state_dict  # noqa: E402

from unstable_core.plugins import get_registry  # noqa: E402
from unstable_core.testing.kuhn_sets import (  # noqa: E402
    AGGRESSIVE,
    kuhn_sets,
    make_kuhn_model,
    policy_q,
    sampled,
    target_of,
    target_q,
    valued,
)

pytestmark = pytest.mark.xdist_group("kuhn-saturation")  # one worker: the saturation point is made once

UPDATES = 150
# NeuRD's gate stops a two-answer set's centred logit at +-threshold, q(target) at sigmoid(2) = 0.881 for
# threshold 1: only the other sets' shared features carry a set past 0.9, and Adam at lr 1e-2 swings the
# minority sets on the way. Measured every 25 updates on a Xeon, min q(target) read 0.124, 0.136, 0.036,
# 0.195, 0.876, 0.099 (150), 0.586, then 0.992, 0.990, 0.989, 0.988, 0.988 (200-300): at 150 the check read
# a swing (it passed on an EPYC by where the swing fell), from 200 a settled policy.
NEURD_UPDATES = 250


@pytest.fixture(scope="module")
def saturated(tmp_path_factory):
    """(model folder, the 12 sets, the card-blind adapter's state) of the saturation point."""
    from unstable_core.model_loading import load_tokenizer

    torch.set_num_threads(1)
    model = make_kuhn_model(str(tmp_path_factory.mktemp("kuhn-model")))
    sets = kuhn_sets(load_tokenizer(model))
    blind = make("mmd", model, tmp_path_factory.mktemp("blind"), eta=20.0, alpha=0.0)
    aggressive = [next(m for m in s.moves if m in AGGRESSIVE) for s in sets]
    for _ in range(30):  # until q(bet or call) >= 0.99 at every set: 5 updates
        blind.update([valued(s, a) for s, a in zip(sets, aggressive, strict=True)])
        if min(target_q(blind, sets, aggressive).values()) >= 0.99:
            break
    else:
        raise AssertionError("the card-blind point was not reached in 30 updates")
    return model, sets, get_peft_model_state_dict(blind.model)


def make(name, model, run_dir, **options):
    cls = get_registry().load("learner", name)
    learner = cls.create(
        model,
        device="cpu",
        run_dir=run_dir,
        lora_config={"lora_rank": 8},
        max_generation_len=8,
        learning_rate=1e-2,
        batch_size=12,
        mini_batch_size=12,
        seed=0,
    )
    learner.initialize_algorithm(**({"legal_mass_coef": 0.0} if name != "reinforce" else {}), **options)
    return learner


def train(name, saturated, tmp_path, seed=0, updates=UPDATES, **options):
    model, sets, blind = saturated
    learner = make(name, model, tmp_path, **options)
    set_peft_model_state_dict(learner.model, blind)
    targets = [target_of(s.key) for s in sets]
    rng = random.Random(seed)
    for _ in range(updates):
        if name == "reinforce":
            qs = policy_q(learner, sets)
            batch = [sampled(s, t, q, rng) for s, t, q in zip(sets, targets, qs, strict=True)]
        else:
            batch = [valued(s, t) for s, t in zip(sets, targets, strict=True)]
        learner.update(batch)
    return target_q(learner, sets, targets)


def test_sampled_policy_gradient_mostly_stays_card_blind(saturated, tmp_path):
    found = [train("reinforce", saturated, tmp_path / str(seed), seed=seed) for seed in range(4)]
    reached = [seed for seed, q in enumerate(found) if min(q.values()) >= 0.9]
    assert len(reached) <= 2, (reached, found)


@pytest.mark.parametrize(
    ("name", "updates", "options"), [("neurd", NEURD_UPDATES, {"threshold": 1.0}), ("mmd", UPDATES, {})]
)
def test_legal_answer_signals_reach_the_card_dependent_target(saturated, tmp_path, name, updates, options):
    found = train(name, saturated, tmp_path, updates=updates, **options)
    assert min(found.values()) >= 0.9, found
