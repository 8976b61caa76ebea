"""Single-turn tasks: the one-turn env, task sources (JSONL files, datasets, the arithmetic generator), task
ids beside game ids, and a task played, summarised and reported like a game (accuracy = win rate)."""

import asyncio
import json

import pytest

from unstable_core.config import RunConfig
from unstable_core.envs import TaskEnv, TaskItem
from unstable_core.envs.catalogue import (
    canonical_id,
    check_env_id,
    default_players,
    get_task,
    is_task,
    list_envs,
    make_env,
    template_for,
)
from unstable_core.envs.sources import ArithmeticTask, hf_task, jsonl_task, parse_hf_id
from unstable_core.envs.specs import task_specs, train_specs
from unstable_core.envs.tasks import SOLO
from unstable_core.errors import ConfigError
from unstable_core.games import play_game
from unstable_core.inference.base import GenerationOutput, SamplingParams
from unstable_core.report.checkpoint_rates import compare_quarters, rates_from_games
from unstable_core.report.evaluation import aggregate, plain_table
from unstable_core.report.learning_verdict import rate_label
from unstable_core.report.scheduled_eval import eval_panels, last_eval_lines, summarise
from unstable_core.types import GameSpec, PlannedGame, PlayerSpec, Triple, to_dict


@pytest.fixture
def task_file(tmp_path):
    path = tmp_path / "sums.jsonl"
    records = [{"prompt": "What is 2 + 3?", "answer": 5}, {"prompt": "What is 10 / 4?", "answer": "5/2"}]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n")  # a blank line is skipped
    return str(path)


def test_a_task_env_takes_one_answer_and_rewards_a_correct_one(task_file):
    env = TaskEnv(jsonl_task(task_file))
    env.reset(num_players=1, seed=3)  # item 3 mod 2 = item 1
    assert env.get_observation() == (0, "What is 10 / 4?")
    done, info = env.step("10 / 4 = \\boxed{2.5}")
    assert done and info["answer"] == "2.5" and info["reference"] == "5/2"
    assert info["item"] == f"{task_file}:2"
    assert env.close() == ({0: 1.0}, {0: {"reason": "correct"}})
    assert env.state.game_info[0]["invalid_move"] is False

    env.reset(num_players=1, seed=0)
    env.step("\\boxed{6}")
    rewards, info = env.close()
    assert rewards == {0: -1.0} and info[0]["reason"].startswith("wrong")

    env.reset(num_players=1, seed=0)
    env.step("I do not know")  # no number at all: no answer, an invalid move
    assert env.close()[0] == {0: -1.0} and env.state.game_info[0]["invalid_move"] is True
    with pytest.raises(RuntimeError, match="one answer"):
        env.step("\\boxed{5}")
    with pytest.raises(ValueError, match="one player"):
        env.reset(num_players=2, seed=0)


@pytest.mark.parametrize(
    "line, expected",
    [
        ("{not json", "sums.jsonl:2: not JSON"),
        ("[1, 2]", "sums.jsonl:2: a list, not a JSON object"),
        ('{"prompt": "q"}', "sums.jsonl:2: no 'answer' field; the fields are 'prompt'"),
        ('{"question": "q", "answer": 1}', "sums.jsonl:2: no 'prompt' field"),
        ('{"prompt": " ", "answer": 1}', "sums.jsonl:2: 'prompt' must be non-empty text"),
        ('{"prompt": "q", "answer": true}', "sums.jsonl:2: 'answer' must be non-empty text or a number"),
    ],
)
def test_a_bad_record_is_an_error_naming_its_line(tmp_path, line, expected):
    path = tmp_path / "sums.jsonl"
    path.write_text('{"prompt": "What is 1 + 1?", "answer": "2"}\n' + line + "\n")
    with pytest.raises(ConfigError, match=expected.replace("[", r"\[")):
        jsonl_task(path)


def test_an_empty_or_missing_task_file_says_so(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ConfigError, match="has no items"):
        jsonl_task(tmp_path / "empty.jsonl")
    with pytest.raises(ConfigError, match="cannot be read"):
        jsonl_task(tmp_path / "missing.jsonl")


def test_task_ids_beside_game_ids(task_file, tmp_path, monkeypatch):
    assert is_task(task_file) and is_task("arithmetic-2") and is_task("hf:openai/gsm8k")
    assert not is_task("TicTacToe-v0-train")
    assert default_players("arithmetic-1") == 1 and default_players("TicTacToe-v0-train") == 2
    assert template_for("arithmetic-1", "default") == template_for("arithmetic-1", "move") == "task"
    assert template_for("arithmetic-1", "qwen3-reasoning") == "qwen3-reasoning"  # a chosen template stays
    assert template_for("TicTacToe-v0-train", "default") == "default"
    monkeypatch.chdir(tmp_path)
    assert canonical_id("sums.jsonl") == task_file
    check_env_id(task_file, 1)
    check_env_id("TicTacToe-v0-train", 2)
    with pytest.raises(ConfigError, match="a task has one player"):
        check_env_id("arithmetic-1", 2)
    with pytest.raises(ConfigError, match="did you mean arithmetic-"):
        check_env_id("arithmetic-x")
    with pytest.raises(ConfigError, match="not a task"):
        get_task("TicTacToe-v0-train")
    listed = {e.id: e for e in list_envs()}
    assert (listed["arithmetic-3"].kind, listed["arithmetic-3"].players) == ("task", (1,))
    assert listed["arithmetic-3"].provider == "unstable-core"
    assert listed["TicTacToe-v0-train"].provider == "textarena"
    assert "TicTacToe-v0-raw" not in listed and "TicTacToe-v0-raw" in {e.id for e in list_envs(True)}


def test_the_arithmetic_task_is_registered_by_difficulty_and_its_answers_check():
    task = get_task("arithmetic-3")
    assert isinstance(task, ArithmeticTask) and task.difficulty == 3 and task.size is None
    item = task.item(17)
    assert item == task.item(17) and item != task.item(18)
    assert task.check(f"so \\boxed{{{item.answer}}}", item).correct
    assert not task.check(f"\\boxed{{{int(item.answer) + 1}}}", item).correct
    env = make_env("arithmetic-3")
    env.reset(num_players=1, seed=17)
    assert env.get_observation() == (0, item.prompt)
    with pytest.raises(ValueError):
        ArithmeticTask(difficulty=9)


def test_a_dataset_by_id_or_folder_is_a_task(tmp_path):
    pytest.importorskip("datasets")
    folder = tmp_path / "gsm-like"
    folder.mkdir()
    rows = [
        {"question": "Natalia sold 48 clips and half as many more. How many?", "answer": "48 + 24 #### 72"}
    ]
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = hf_task(f"hf:{folder}")  # the local folder stands for a hub id: load_dataset takes either
    assert task.size == 1 and task.items[0].prompt.startswith("Natalia")
    assert task.check("They sold 72 clips.", task.items[0]).correct
    with pytest.raises(ConfigError, match="no prompt or answer column"):
        hf_task(f"hf:{folder}?prompt=nope")
    with pytest.raises(ConfigError, match="cannot be loaded"):
        hf_task(f"hf:{folder}?split=train")
    assert parse_hf_id("hf:openai/gsm8k?config=main&split=test") == (
        "openai/gsm8k",
        {"config": "main", "split": "test"},
    )
    with pytest.raises(ConfigError, match="unknown option"):
        parse_hf_id("hf:openai/gsm8k?colour=red")


def test_a_run_config_reads_tasks_as_one_player_envs(task_file):
    cfg = RunConfig(train_envs=["arithmetic-1", "hf:openai/gsm8k?split=test"], eval_tasks=[task_file])
    train = train_specs(cfg)
    assert [(s.env_id, s.num_players, s.num_actors, s.prompt_template) for s in train] == [
        ("arithmetic-1", 1, 1, "task"),
        ("hf:openai/gsm8k?split=test", 1, 1, "task"),
    ]
    (spec,) = task_specs(cfg)
    assert (spec.env_id, spec.num_players, spec.prompt_template) == (task_file, 1, "task")


class Answers:
    """A scripted `generate`: answers the prompts it is given from a fixed list, with real token ids."""

    def __init__(self, tokenizer, replies):
        self.tokenizer, self.replies, self.prompts = tokenizer, list(replies), []

    async def __call__(self, request):
        self.prompts.append(self.tokenizer.decode(request.prompt_ids))
        text = self.replies[len(self.prompts) - 1]
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return GenerationOutput(text, ids, [-0.5] * len(ids), "stop")


def test_a_task_is_played_as_a_one_turn_game_with_its_exact_tokens(tiny_model, task_file):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    player = PlayerSpec(0, "ckpt-2", collect_data=True, prompt_template="task")
    generate = Answers(tokenizer, ["2 + 3 = \\boxed{5}", "It is 7"])
    results = [
        asyncio.run(
            play_game(
                GameSpec(i, task_file, 0, [player], group_id="g0", group_size=2),
                generate,
                tokenizer,
                lora_paths={0: None},
                policy_versions={0: 2},
                params=SamplingParams(max_tokens=8),
            )
        )
        for i in range(2)
    ]
    assert all("What is 2 + 3?" in p and "\\boxed{}" in p for p in generate.prompts)  # one item for the group
    right, wrong = results
    assert not right.info.failed and right.info.final_rewards == {0: 1.0} and right.info.num_turns == 1
    (step,) = right.trajectories[0].steps
    assert step.action == "5" and step.format_ok and not step.invalid_move and step.final_reward == 1.0
    assert step.completion_ids == tokenizer.encode("2 + 3 = \\boxed{5}", add_special_tokens=False)
    assert step.step_info["env"] == {"answer": "5", "reference": "5", "item": f"{task_file}:1"}
    assert wrong.info.final_rewards == {0: -1.0} and wrong.info.reason == "wrong: 7 != 5"
    (step,) = wrong.trajectories[0].steps
    assert step.action == "7" and not step.format_ok  # a plain final number counts, but is not boxed


def task_game(idx, uid, correct, env="arithmetic-1", eval_=True, boxed=True):
    """A finished one-player game record of `uid` answering right or wrong."""
    from unstable_core.types import GameInformation, GameResult, Step, Trajectory

    version = int(uid.split("-")[1])
    reward = 1.0 if correct else -1.0
    step = Step(0, env, "q", "a", format_ok=boxed, model_uid=uid, policy_version=version, final_reward=reward)
    info = GameInformation(
        idx, env, eval=eval_, models={0: uid}, learner_pids=[0], final_rewards={0: reward}, num_turns=1
    )
    return GameResult(info, [Trajectory(0, env, uid, [step], reward, collect_data=True)])


def test_a_task_evaluation_is_summarised_as_accuracy():
    games = [task_game(i, "ckpt-4", correct=i < 3) for i in range(4)]
    metrics = summarise("ckpt-4", games)
    key = f"eval/arithmetic-1/vs_{SOLO}"
    assert (metrics[f"{key}/wins"], metrics[f"{key}/losses"], metrics[f"{key}/games"]) == (3, 1, 4)
    assert metrics[f"{key}/win_rate"] == 0.75
    assert last_eval_lines({4: metrics}) == [
        ("eval ckpt-4 arithmetic-1", "accuracy 0.75 [0.30, 0.95] correct/-/wrong 3/0/1")
    ]
    (panel,) = eval_panels([{"step": 4, **metrics}])
    assert panel[0] == "accuracy (correct/n)\narithmetic-1\n(eval, 4 items)" and panel[2] == [0.75]


def test_training_answers_give_a_task_accuracy_per_checkpoint_and_its_test():
    games = [task_game(i, "ckpt-0", correct=i < 4, eval_=False) for i in range(40)]
    games += [task_game(100 + i, "ckpt-3", correct=i < 30, eval_=False) for i in range(40)]
    rates = rates_from_games([to_dict(g) for g in games])
    assert rates[0].win_rate(SOLO).k == 4 and rates[3].win_rate(SOLO).k == 30
    test = compare_quarters(rates).tests["win_rate_vs_none"]
    assert test.p_value < 1e-6
    assert rate_label("win_rate_vs_none") == "task accuracy"


def test_unstable_eval_reports_a_task_per_model(task_file):
    triple = Triple("ckpt-4", SOLO, task_file)
    player = [PlayerSpec(0, "ckpt-4")]
    planned = [PlannedGame(triple, GameSpec(i, task_file, i, player, eval=True), 0) for i in range(5)]
    results = [task_game(i, "ckpt-4", correct=i % 2 == 0, env=task_file, boxed=i < 4) for i in range(4)]
    (stats,) = aggregate(planned, results)  # game 4 has no record: it failed
    row = stats.to_dict()
    assert (row["task"], row["items"], row["failed"], row["correct"]) == (task_file, 4, 1, 2)
    assert row["accuracy"]["rate"] == 0.5 and row["boxed_rate"]["k"] == 4
    table = plain_table([stats], "title").splitlines()
    assert table[1].split()[:4] == ["model", "task", "items", "correct"]
    assert table[2].split()[:6] == ["ckpt-4", task_file, "4", "(1", "failed)", "2/4"]


def test_group_answers_share_their_item():
    env_a, env_b = make_env("arithmetic-2"), make_env("arithmetic-2")
    env_a.reset(num_players=1, seed=123456)
    env_b.reset(num_players=1, seed=123456)
    assert env_a.get_observation() == env_b.get_observation()
    assert TaskItem("q", "1") == TaskItem("q", "1")


def test_a_task_trained_on_and_evaluated_is_evaluated_once(task_file, tmp_path):
    from unstable_core.runtime.launch.plan import RunPlan

    cfg = RunConfig(train_envs=["arithmetic-1"], eval_tasks=["arithmetic-1", task_file], eval_every=2,
                    runs_dir=str(tmp_path))  # fmt: skip
    plan = RunPlan.resolve(cfg, learn=False)
    assert [(s.env_id, s.num_players) for s in plan.scheduled_eval.specs] == [
        ("arithmetic-1", 1),
        (task_file, 1),
    ]
    assert [s.env_id for s in plan.eval_specs()] == ["arithmetic-1", task_file]
    games = RunConfig(train_envs=["TicTacToe-v0-train"], eval_tasks=[task_file], eval_every=2)
    plan = RunPlan.resolve(games, learn=False)
    assert [(s.env_id, s.fixed_opponent) for s in plan.scheduled_eval.specs] == [
        ("TicTacToe-v0-train", "base"),
        (task_file, None),
    ]


def test_the_leaderboard_calls_the_answers_to_tasks_accuracy():
    from unstable_core.report.leaderboard import vs_label

    assert (vs_label(SOLO), vs_label("base")) == ("task accuracy", "vs base")
