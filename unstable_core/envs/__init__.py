"""Games and single-turn tasks: what `--env ID` can name.

- `catalogue`: ids to envs: plugin-registered games and tasks (`register_envs`), task files and datasets,
  TextArena's registry; `make_env(id)` (here too: a fresh env of any id, a plugin's game included, as a
  run plays it) and the player counts of an id.
- `tasks`: a single-turn task (prompt/answer items and a checker) and the one-turn env that plays it.
- `sources`: the task sources: the generated arithmetic task, JSONL files, Hugging Face datasets.
- `answers`: the math answer checker (`\\boxed{}`, numbers compared by value).
- `arithmetic`: the arithmetic problem generator.
"""

from unstable_core.envs.catalogue import make_env
from unstable_core.envs.tasks import Task, TaskEnv, TaskItem

__all__ = ["Task", "TaskEnv", "TaskItem", "make_env"]
