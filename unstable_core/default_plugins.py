"""The core's own components, registered through the same hooks as any plugin (as `unstable-core`)."""

from __future__ import annotations

from unstable_core.hookspecs import hookimpl


@hookimpl
def register_backends(register):
    register(
        "transformers",
        "unstable_core.inference.hf.backend:TransformersBackend",
        "any causal LM on CPU or CUDA, batched, LoRA hot-swap",
    )
    register(
        "vllm",
        "unstable_core.inference.vllm.backend:VLLMBackend",
        "vLLM's async engine with LoRA requests (GPU)",
    )
    register(
        "openai",
        "unstable_core.inference.openai_api:OpenAIBackend",
        "openai:MODEL on an OpenAI-compatible server (OpenRouter, llama.cpp, vLLM serve); opponents only",
    )


@hookimpl
def register_trackers(register):
    register("jsonl", "unstable_core.trackers.jsonl:JSONLTracker", "metrics.jsonl in the run directory")
    register("wandb", "unstable_core.trackers.wandb:WandbTracker", "Weights & Biases (offline without a key)")
    register(
        "tensorboard",
        "unstable_core.trackers.tensorboard:TensorBoardTracker",
        "TensorBoard event files in the run directory",
    )


@hookimpl
def register_templates(register):
    from unstable_core.games.templates import TEMPLATES

    for name, fn in TEMPLATES.items():
        register(name, fn)
    register(
        "kuhn-compact",
        "unstable_core.games.compact_templates:kuhn_compact",
        "Kuhn Poker in a few lines: rules, card, this round's moves, legal moves (answer opened with [)",
    )
    register(
        "tictactoe-compact",
        "unstable_core.games.compact_templates:tictactoe_compact",
        "TicTacToe in a few lines: your mark, the board, legal moves (answer opened with [)",
    )
    register(
        "tictactoe-lines",
        "unstable_core.games.compact_templates:tictactoe_lines",
        "TicTacToe as its 8 lines (rows, columns, diagonals), each cell a mark or its number (answer opened "
        "with [)",
    )
    register(
        "tictactoe-mine",
        "unstable_core.games.compact_templates:tictactoe_mine",
        "TicTacToe's 8 lines from the mover's side: its marks X, the opponent's O (answer opened with [)",
    )


@hookimpl
def register_envs(register):
    import functools

    from unstable_core.envs.sources import ArithmeticTask

    # the wrappers of TextArena's KuhnPoker-v0-*-train ids: the same observation text as those games
    wrappers = [
        "textarena.wrappers.ObservationWrappers.llm_observation_wrapper:GameMessagesAndCurrentBoardObservationWrapper",
        "textarena.wrappers.ActionWrappers.action_formatting_wrapper:ActionFormattingWrapper",
    ]
    for env_id, factory, rounds in (("KuhnPoker-v0-chips", "one_round", "1 round"),
                                    ("KuhnPoker-v0-short-chips", "five_rounds", "5 rounds")):  # fmt: skip
        register(
            env_id,
            f"unstable_core.envs.kuhn:{factory}",
            f"Kuhn Poker as its rules say (a bet puts a chip in the pot), {rounds}, rewarded in net chips",
            players=2,
            wrappers=wrappers,
        )

    shapes = {1: "a +- b, 1..20", 2: "two of + - *, 1..20"}
    shapes.update({d: f"{d} of + - * / with ( ), 1..50" for d in (3, 4, 5)})
    for level, shape in shapes.items():
        register(
            f"arithmetic-{level}",
            functools.partial(ArithmeticTask, difficulty=level),
            f"generated integer arithmetic ({shape}); answers checked by value",
            task=True,
        )


@hookimpl
def register_players(register):
    from unstable_core.games.players.legal_moves import supported_games
    from unstable_core.games.players.optimal import OPTIMAL_GAMES

    register(
        "random",
        "unstable_core.games.players.random_move:RandomPlayer",
        "a uniformly random legal move",
        games=supported_games(),
    )
    register(
        "optimal",
        "unstable_core.games.players.optimal:optimal",
        "perfect play: TicTacToe by minimax, ties broken at random; Kuhn Poker a Nash equilibrium, its "
        "alpha drawn per game",
        games=OPTIMAL_GAMES,
    )
    register(
        "heuristic",
        "unstable_core.games.players.tictactoe:HeuristicPlayer",
        "takes a win, else blocks one, else a random legal cell",
        games=["TicTacToe"],
    )


@hookimpl
def register_probes(register):
    register(
        "kuhn-exploitability",
        "unstable_core.probes.kuhn_exploitability:KuhnExploitability",
        "exact exploitability of the first-round policy (OpenSpiel); uniform 0.458, Nash 0",
        games=["KuhnPoker"],
    )
    register(
        "tictactoe-tactics",
        "unstable_core.probes.tictactoe_tactics:TicTacToeTactics",
        "probability mass on winning and blocking cells at 64 positions from real games",
        games=["TicTacToe"],
    )
