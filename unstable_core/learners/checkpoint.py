"""Checkpoint files without pickle: optimizer state split into safetensors (tensors) and JSON (the rest),
and folders that appear complete or not at all."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from unstable_core.errors import UnstableError
from unstable_core.io import atomic_write_text


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
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True))


def write_folder_atomically(final: Path, fill: Callable[[Path], None]) -> Path:
    """Call `fill(tmp)` on `<final>.tmp`, then rename it to `final`: readers never see half a checkpoint."""
    final = Path(final)
    tmp = final.with_name(final.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)  # left over from a crash mid-save
    tmp.mkdir(parents=True)
    fill(tmp)
    if final.exists():  # re-saving the same step (after a resume): swap the old folder out first
        old = final.with_name(final.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old)
    else:
        os.replace(tmp, final)
    return final


def read_json(path: Path) -> Any:
    """Read a JSON file of a checkpoint, or say which file is missing."""
    if not path.is_file():
        raise UnstableError(f"checkpoint file {path} is missing; pass a folder written by save_checkpoint()")
    return json.loads(path.read_text())
