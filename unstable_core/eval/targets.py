"""Who `unstable eval` plays: its MODEL and --opponent arguments resolved to models, without loading any,
the checks of what each can play, and the RunConfig they play with.

An argument is a scripted player (`random`, `optimal`, ...: `unstable plugins --all` lists them), `base`
(the base model of the evaluated models), `openai:MODEL`, a run directory
(its latest checkpoint, or every one with --all-checkpoints), a checkpoint folder (a LoRA adapter), a
local model folder, or an alias / hub id. Checkpoints keep the run's uids (`ckpt-N`), so that a run's
leaderboard reads the evaluation's games as its own.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import attrs

from unstable_core.config import RunConfig
from unstable_core.errors import ConfigError, UnstableError, describe
from unstable_core.games.players.catalogue import check_players, is_player, names
from unstable_core.games.templates import get_template
from unstable_core.model_loading import DEFAULT_MODEL, is_api_model
from unstable_core.runtime.launch.plan import FixedSchedule, LeagueEntry
from unstable_core.types import PlannedGame

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

BASE = "base"
MAIN = "main"  # the engine of the checkpoints' base model
STEP_DIR = re.compile(r"step-(\d+)")


@attrs.frozen
class EvalTarget:
    """One player of the evaluation. `kind`: "adapter" (a LoRA checkpoint on `model`), "model" (a whole
    model), "api" (openai:MODEL) or "player" (a scripted player, by its name). `label` is its uid in the
    games and the tables."""

    label: str
    kind: str
    model: str | None = None
    adapter: str | None = None
    step: int = 0
    run_dir: str | None = None


PLAYERS = (
    "a run directory, a checkpoint folder, a model folder, an alias or hub id, openai:MODEL, 'base' or a "
    "scripted player"
)


def is_run_dir(path: Path) -> bool:
    """A folder `unstable run` made: its config.toml (checkpoints come with the first update)."""
    return (path / "config.toml").is_file()


def run_base_model(run_dir: Path) -> str:
    """The base model a run trained (its config.toml's model_name)."""
    try:
        return str(tomllib.loads((run_dir / "config.toml").read_text())["model_name"])
    except (OSError, KeyError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(
            f"run directory {run_dir}: cannot read model_name from config.toml ({exc})"
        ) from exc


def run_configs(targets: list[EvalTarget]) -> dict[str, dict[str, Any]]:
    """Run directory -> its config.toml, for every run a target comes from."""
    configs = {}
    for run_dir in sorted({t.run_dir for t in targets if t.run_dir}):
        try:
            configs[run_dir] = tomllib.loads((Path(run_dir) / "config.toml").read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"run directory {run_dir}: cannot read config.toml ({exc})") from exc
    return configs


def run_setting(targets: list[EvalTarget], name: str, default: Any, option: str) -> Any:
    """A setting (e.g. prompt_template) as the runs of the evaluated checkpoints trained with it, so that a
    checkpoint plays as it learned; `default` when no target comes from a run. Runs that disagree are
    refused: `option` is the command-line option that settles it."""
    return setting_of(run_configs(targets), name, default, option)


def setting_of(configs: dict[str, dict[str, Any]], name: str, default: Any, option: str) -> Any:
    """`run_setting` from the runs' configs (`run_configs`)."""
    values = {run_dir: config.get(name, default) for run_dir, config in configs.items()}
    if len(set(values.values())) > 1:
        found = ", ".join(f"{v!r} ({Path(d).name})" for d, v in values.items())
        raise ConfigError(f"the evaluated runs were trained with different {name}: {found}; give {option}")
    return next(iter(values.values()), default)


def checkpoints_of(run_dir: Path) -> list[tuple[int, Path]]:
    """The run's complete checkpoints (adapter written), oldest first."""
    out = []
    if not (run_dir / "checkpoints").is_dir():
        return out
    for folder in (run_dir / "checkpoints").iterdir():
        match = STEP_DIR.fullmatch(folder.name)
        if match and (folder / "adapter_config.json").is_file() and any(folder.glob("adapter_model.*")):
            out.append((int(match.group(1)), folder))
    return sorted(out)


def _checkpoint(folder: Path, step: int | None = None) -> EvalTarget:
    """A LoRA checkpoint folder; its base model from its run's config.toml, else from the adapter's config."""
    folder = folder.resolve()
    run_dir = folder.parent.parent
    if is_run_dir(run_dir):
        base = run_base_model(run_dir)
    else:
        base = json.loads((folder / "adapter_config.json").read_text()).get("base_model_name_or_path")
        if not base:
            raise ConfigError(f"checkpoint {folder}: adapter_config.json names no base model")
        run_dir = None
    match = STEP_DIR.fullmatch(folder.name)
    step = step if step is not None else int(match.group(1)) if match else 0
    label = f"ckpt-{step}" if match else folder.name
    return EvalTarget(label, "adapter", base, str(folder), step, str(run_dir) if run_dir else None)


def resolve_argument(arg: str, all_checkpoints: bool = False, what: str = "model") -> list[EvalTarget]:
    """The players one argument names (`base` is left as is: it depends on the others); `what` (model,
    opponent) names the argument in errors. A model that does not exist is refused here, before Ray."""
    if arg == BASE:
        return [EvalTarget(arg, arg)]
    if is_player(arg):
        return [EvalTarget(arg, "player")]
    if is_api_model(arg):
        return [EvalTarget(arg, "api", arg)]
    path = Path(arg).expanduser()
    if path.is_dir():
        if is_run_dir(path):
            ckpts = checkpoints_of(path)
            if not ckpts:
                raise ConfigError(
                    f"run directory {arg} has no complete checkpoint yet; evaluate its base model with "
                    f"`unstable eval {run_base_model(path)}`"
                )
            return [_checkpoint(folder, step) for step, folder in (ckpts if all_checkpoints else ckpts[-1:])]
        if (path / "adapter_config.json").is_file():
            return [_checkpoint(path)]
    from unstable_core.runtime.launch.preflight import check_model

    try:
        check_model(arg, what)  # a folder that exists, an alias, a hub id in the cache or on the hub
    except UnstableError as exc:
        raise ConfigError(f"{exc}; a {what} is {PLAYERS} ({', '.join(names())})") from None
    return [EvalTarget(arg, "model", arg)]


def resolve_players(
    models: list[str], opponents: list[str], all_checkpoints: bool = False
) -> tuple[list[EvalTarget], list[EvalTarget]]:
    """(models, opponents) resolved; `base` becomes the one base model of the models."""
    resolved = [
        [t for a in args for t in resolve_argument(a, all_checkpoints, what)]
        for args, what in ((models, "model"), (opponents, "opponent"))
    ]
    bases = {t.model for t in resolved[0] if t.kind in ("adapter", "model")}
    if any(t.kind == BASE for group in resolved for t in group):
        if len(bases) != 1:
            raise ConfigError(
                "'base' is the base model of the evaluated models, but they have "
                + (
                    f"several ({', '.join(sorted(bases))})"
                    if bases
                    else "none (scripted players or API models only)"
                )
                + "; name the base model itself instead"
            )
        (base,) = bases
        resolved = [[EvalTarget(BASE, "model", base) if t.kind == BASE else t for t in g] for g in resolved]
    adapter_bases = {t.model for g in resolved for t in g if t.kind == "adapter"}
    if len(adapter_bases) > 1:
        raise ConfigError(
            f"the checkpoints were trained on different base models ({', '.join(sorted(adapter_bases))}); "
            "evaluate the checkpoints of one base model at a time"
        )
    return _unique_labels(resolved[0]), _unique_labels(resolved[1], taken=resolved[0])


def _unique_labels(targets: list[EvalTarget], taken: list[EvalTarget] = ()) -> list[EvalTarget]:
    """Checkpoints of different runs with the same step get their run's name in front of their label;
    a target named twice is played once."""
    seen = {t.label: t for t in taken}
    out: list[EvalTarget] = []
    for t in targets:
        if t.label in seen and seen[t.label] != t and t.run_dir:
            t = attrs.evolve(t, label=f"{Path(t.run_dir).name}/{t.label}")
        if t.label in seen and seen[t.label] != t:
            raise ConfigError(f"two different players are both called {t.label!r}; give their full paths")
        if t not in out:
            out.append(t)
        seen[t.label] = t
    return out


@attrs.frozen
class EvalTargets:
    """The players of an evaluation, resolved once: the evaluated `models`, their `opponents` (`base`
    already the models' one base model) and the configs of the runs the checkpoints come from."""

    models: list[EvalTarget]
    opponents: list[EvalTarget]
    runs: dict[str, dict[str, Any]] = attrs.field(factory=dict)

    @classmethod
    def resolve(cls, models: list[str], opponents: list[str], all_checkpoints: bool = False) -> EvalTargets:
        """The players the command's arguments name (see `resolve_players`), and their runs' configs."""
        mine, theirs = resolve_players(models, opponents, all_checkpoints)
        return cls(mine, theirs, run_configs(mine))

    def setting(self, name: str, default: Any, option: str) -> Any:
        """A setting as the evaluated checkpoints' runs trained with it (see `run_setting`)."""
        return setting_of(self.runs, name, default, option)

    def players(self, with_opponents: bool = True) -> list[EvalTarget]:
        """Every player, once (the opponents only `with_opponents`: where there are games)."""
        return list(dict.fromkeys(self.models + (self.opponents if with_opponents else [])))

    @staticmethod
    def schedule(players: list[EvalTarget], planned: list[PlannedGame]) -> FixedSchedule:
        """Exactly the `planned` games, between a league of `players` (a checkpoint keeps its uid and step;
        the base model is served by the main engine; any other model is fixed, with an engine of its own)."""
        main = main_model(players)
        league, engines = [], {}
        for t in players:
            if t.kind == "adapter":
                league.append(LeagueEntry(t.label, t.adapter, t.step))
            else:
                league.append(LeagueEntry(t.label, fixed=not (t.kind == "model" and t.model == main)))
            if t.kind == "adapter" or (t.kind == "model" and t.model == main):
                engines[MAIN] = main
            elif t.kind in ("model", "api"):
                engines[t.label] = t.model
        return FixedSchedule(tuple(g.spec for g in planned), tuple(league), engines)


def main_model(targets: list[EvalTarget]) -> str | None:
    """The model of the main engine: the checkpoints' base model, else the first whole local model."""
    for kind in ("adapter", "model"):
        for t in targets:
            if t.kind == kind:
                return t.model
    return None


def eval_config(targets: list[EvalTarget], **options: Any) -> RunConfig:
    """The RunConfig an evaluation plays with: the run's defaults, then `options` (the command's); its main
    model is the evaluated models' base, its fixed opponents the API models (for their checks)."""
    return RunConfig(
        model_name=main_model(targets) or DEFAULT_MODEL,
        fixed_opponents=[t.label for t in targets if t.kind == "api"],
        trackers=[],
        **options,
    )


def check_targets(
    targets: EvalTargets, envs: list[str], tasks: list[str], probes: list[Any], template: str
) -> None:
    """The players can play what they are asked (`probes`: planned probes): each checkpoint's adapter reads
    whole, each scripted player plays its envs and probes and answers no task, no API model is probed, and
    the template (the runs' own, when none was given) is one the game loop knows."""
    mine = targets.models
    for t in mine + targets.opponents:
        if t.kind == "adapter":
            check_adapter_files(t)
    get_template(template)
    scripted = [t.label for t in mine + targets.opponents if t.kind == "player"]
    probed = [t.label for t in mine if t.kind == "player"]
    check_players(
        [*((n, env) for n in scripted for env in envs), *((n, p.env_id) for n in probed for p in probes)]
    )
    for t in mine:
        if tasks and t.kind == "player":
            raise ConfigError(f"`{t.label}` (a scripted player) plays games only; it cannot answer a --task")
        if probes and t.kind == "api":
            raise ConfigError(
                f"--probe measures a model's probabilities of answers, which an API model does not give: "
                f"{t.label}; probe local models, checkpoints and scripted players"
            )


def check_adapter_files(target: EvalTarget) -> None:
    """A checkpoint's adapter files read whole (its config parses, its weights load on the CPU): a
    ConfigError naming the file otherwise, before anything starts."""
    from safetensors import safe_open

    from unstable_core.inference.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS

    folder = Path(target.adapter)
    path = folder / ADAPTER_CONFIG
    try:
        json.loads(path.read_text())
        path = folder / ADAPTER_WEIGHTS
        with safe_open(str(path), framework="pt", device="cpu") as weights:
            for key in weights.keys():  # noqa: SIM118 (a safe_open handle is not iterable)
                weights.get_tensor(key)
    except Exception as exc:  # a missing or cut file, a header safetensors cannot parse
        raise ConfigError(
            f"{target.label}: cannot read {path}: {describe(exc)}; the checkpoint is incomplete or damaged: "
            "evaluate another one"
        ) from None
