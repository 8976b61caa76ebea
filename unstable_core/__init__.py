"""unstable: online, asynchronous, multi-agent reinforcement learning of language models on text games."""

from unstable_core import lazy_word_lists
from unstable_core.hookspecs import hookimpl
from unstable_core.types import (
    EvalEnvSpec,
    GameInformation,
    GameResult,
    GameSpec,
    ModelMeta,
    PlayerSpec,
    Step,
    TrainEnvSpec,
    Trajectory,
)

__version__ = "0.1.0"

lazy_word_lists.install()  # before anything imports textarena: its word lists cost 1.5 CPU-s a process

__all__ = [
    "EvalEnvSpec",
    "GameInformation",
    "GameResult",
    "GameSpec",
    "ModelMeta",
    "PlayerSpec",
    "Step",
    "TrainEnvSpec",
    "Trajectory",
    "build",
    "hookimpl",
]


def build(*args, **kwargs):
    """Wire a run (see `unstable_core.runtime.run.build`); imported lazily so `import unstable_core` stays light."""
    from unstable_core.runtime.run import build as _build

    return _build(*args, **kwargs)
