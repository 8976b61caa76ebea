"""Checkpoint files without pickle: optimizer state split into safetensors (tensors) and JSON (the rest),
and folders that appear complete or not at all."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from unstable_core.errors import UnstableError
from unstable_core.fault_points import pause_point
from unstable_core.inference.adapters import ADAPTER_WEIGHTS
from unstable_core.io import atomic_write_text, dumps_json


def optimizer_state_to_flat(state_dict: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split `optimizer.state_dict()` into {"state/<param>/<key>": tensor} and a JSON-ready rest."""
    import torch

    tensors: dict[str, Any] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, param_state in state_dict["state"].items():
        for key, value in param_state.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state/{idx}/{key}"] = value.detach().contiguous().cpu()
            else:
                scalars.setdefault(str(idx), {})[key] = value
    return tensors, {"param_groups": state_dict["param_groups"], "scalars": scalars}


def optimizer_state_from_flat(tensors: dict[str, Any], rest: dict[str, Any]) -> dict[str, Any]:
    """The inverse of `optimizer_state_to_flat`: a dict for `optimizer.load_state_dict`."""
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        _, idx, key = name.split("/", 2)
        state.setdefault(int(idx), {})[key] = value
    for idx, values in rest.get("scalars", {}).items():
        state.setdefault(int(idx), {}).update(values)
    return {"state": state, "param_groups": rest["param_groups"]}


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (temporary file, then rename)."""
    atomic_write_text(path, dumps_json(data, indent=2, sort_keys=True))


def fsync_path(path: Path) -> None:
    """Flush a file's or a folder's data and metadata to disk (a folder: its entries, e.g. a rename)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(folder: Path) -> None:
    """fsync every file under `folder`, then every folder, deepest first."""
    folders = []
    for root, _, files in os.walk(folder):
        folders.append(Path(root))
        for name in files:
            fsync_path(Path(root) / name)
    for f in reversed(folders):
        fsync_path(f)


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def exchange(a: Path, b: Path) -> bool:
    """Atomically swap two existing paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    rc = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return rc == 0


def write_folder_atomically(final: Path, fill: Callable[[Path], None]) -> Path:
    """Call `fill(tmp)` on `<final>.tmp`, fsync it, then rename it to `final`: readers never see half a
    checkpoint, and after a crash the folder is either the old one or the new one, on disk.

    Re-saving a step swaps the new folder and the old one in one atomic exchange (Linux), so the step is
    never missing; elsewhere the old folder is moved to `<final>.old` first, and `recover_folder` puts it
    back if a crash falls between the two renames."""
    final = Path(final)
    tmp = final.with_name(final.name + ".tmp")
    old = final.with_name(final.name + ".old")
    if tmp.exists():
        shutil.rmtree(tmp)  # left over from a crash mid-save
    tmp.mkdir(parents=True)
    fill(tmp)
    _fsync_tree(tmp)
    pause_point(f"checkpoint-{final.name}")
    if final.exists():  # re-saving the same step (after a resume)
        if exchange(tmp, final):
            fsync_path(final.parent)
            shutil.rmtree(tmp)  # now holds the old folder
            return final
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        os.replace(tmp, final)
        fsync_path(final.parent)
        shutil.rmtree(old)
    else:
        os.replace(tmp, final)
        fsync_path(final.parent)
    return final


def recover_folder(final: Path) -> None:
    """After a crash between the two renames of a re-save without atomic exchange: `<final>.old` is
    the last complete folder, so it is put back."""
    final = Path(final)
    old = final.with_name(final.name + ".old")
    if not final.exists() and old.is_dir():
        os.replace(old, final)


def read_json(path: Path) -> Any:
    """Read a JSON file of a checkpoint, or say which file is missing."""
    recover_folder(path.parent)
    if not path.is_file():
        raise UnstableError(f"checkpoint file {path} is missing; pass a folder written by save_checkpoint()")
    return json.loads(path.read_text())


OPTIMIZER_FILE = "optimizer.safetensors"  # kept in the newest `keep_optimizer_states` checkpoints only
#: what every checkpoint folder holds beside an algorithm's extras and the optimizer state (`save_checkpoint`)
CHECKPOINT_FILES = (
    "learner_state.json",
    "adapter_config.json",
    ADAPTER_WEIGHTS,
)


def prune_optimizer_states(checkpoints: Path, keep: int, compact_adapters: bool = True) -> list[Path]:
    """Delete the optimizer state of every `step-<n>` folder in `checkpoints` but the newest `keep`, and with
    `compact_adapters` store those folders' float32 adapter weights as bfloat16 (half the disk; the adapters
    stay: the league and evaluation play them). Returns the files removed or rewritten."""
    steps = sorted(
        (int(p.name.split("-", 1)[1]), p)
        for p in Path(checkpoints).glob("step-*")
        if p.is_dir() and p.name.split("-", 1)[1].isdigit()
    )
    changed = []
    for _, folder in steps[:-keep] if keep > 0 else steps:
        state = folder / OPTIMIZER_FILE
        if state.is_file():
            state.unlink()
            changed.append(state)
        weights = folder / ADAPTER_WEIGHTS
        if compact_adapters and weights.is_file() and compact_adapter(weights):
            changed.append(weights)
    return changed


def compact_adapter(weights: Path) -> bool:
    """Rewrite a safetensors file's float32 tensors as bfloat16, atomically (a reader holding the old file
    reads it whole); False if it holds none. bfloat16 keeps float32's range with 8 bits of mantissa: a
    LoRA weight moves by at most 2**-9 of itself (tests/test_resume_fallback.py measures the log-probs)."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(weights), framework="pt", device="cpu") as f:
        metadata = f.metadata()
        tensors = {key: f.get_tensor(key) for key in f.keys()}  # noqa: SIM118 (not iterable)
    if not any(t.dtype == torch.float32 for t in tensors.values()):
        return False
    compact = {k: t.to(torch.bfloat16) if t.dtype == torch.float32 else t for k, t in tensors.items()}
    part = weights.with_name(weights.name + ".part")
    save_file(compact, str(part), metadata=metadata)
    fsync_path(part)
    os.replace(part, weights)
    fsync_path(weights.parent)
    return True


def disk_bytes(folder: Path) -> int:
    """Bytes of the files under `folder` (a run's disk use)."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file() and not p.is_symlink())


def checkpoint_problem(folder: Path, required: tuple[str, ...] = CHECKPOINT_FILES) -> str | None:
    """Why the checkpoint in `folder` would not load, naming the file, or None if every file reads whole:
    the `required` files are there, every JSON file parses, every safetensors file's header and tensors
    load (an algorithm's extras, such as A2C's critic/, included). Reads each tensor once, on the CPU."""
    folder = Path(folder)
    for name in required:
        if not (folder / name).is_file():
            return f"{folder / name} is missing"
    for path in sorted(folder.rglob("*")):
        problem = None
        if path.suffix == ".json":
            problem = _json_problem(path)
        elif path.suffix == ".safetensors":
            problem = _safetensors_problem(path)
        if problem is not None:
            return f"{path}: {problem}"
    return None


def _json_problem(path: Path) -> str | None:
    try:
        json.loads(path.read_text())
    except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return f"{exc} ({type(exc).__name__})"
    return None


def _safetensors_problem(path: Path) -> str | None:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            for key in f.keys():  # noqa: SIM118 (a safe_open handle is not iterable)
                f.get_tensor(key)
    except Exception as exc:  # safetensors' own error type, OSError, ...: the file does not load
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"{first} ({type(exc).__name__})" if first else type(exc).__name__
    return None
