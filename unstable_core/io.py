"""Files of the run directory: atomic writes (temporary file, then rename) and JSON lines."""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs


@contextlib.contextmanager
def naming(path: str | os.PathLike) -> Iterator[None]:
    """An OSError raised inside that names no file (a write, flush or fsync on an open file) is raised
    again naming `path`, so that the run's one-line error says which file could not be written."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None or exc.errno is None:
            raise
        raise type(exc)(exc.errno, exc.strerror, str(path)) from exc


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` so that readers see the old file or the new one, never half of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with naming(path), os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; run files are ordinary files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def finite_json(data: Any) -> tuple[Any, int]:
    """`data` with every NaN or infinity replaced by None (JSON null), and how many were replaced."""
    if isinstance(data, float):
        return (data, 0) if math.isfinite(data) else (None, 1)
    if isinstance(data, dict):
        out, n = {}, 0
        for k, v in data.items():
            out[k], m = finite_json(v)
            n += m
        return out, n
    if isinstance(data, (list, tuple)):
        items = [finite_json(v) for v in data]
        return [v for v, _ in items], sum(m for _, m in items)
    if hasattr(data, "tolist") and not isinstance(data, (str, bytes)):
        return finite_json(data.tolist())
    if attrs.has(type(data)):
        return finite_json(attrs.asdict(data, recurse=False))
    return data, 0


def _encode(data: Any, **kwargs: Any) -> tuple[str, int]:
    """JSON text of `data` (dicts, lists, numbers, strings and attrs instances, nested) with every
    non-finite number written as null, and how many were. The encoder walks the data in C; only data that
    holds a NaN or an infinity is walked again in Python (a game's record holds thousands of token ids)."""
    try:
        return json.dumps(data, allow_nan=False, default=_json_default, **kwargs), 0
    except ValueError:  # a NaN or an infinity somewhere
        clean, n = finite_json(data)
        return json.dumps(clean, allow_nan=False, default=_json_default, **kwargs), n


def json_line(record: Any) -> tuple[str, int]:
    """One JSON line of `record`, and how many non-finite numbers it wrote as null."""
    text, n = _encode(record)
    return text + "\n", n


def dumps_json(data: Any, **kwargs: Any) -> str:
    """JSON text that is valid JSON: a non-finite number is written as null (never a bare NaN)."""
    return _encode(data, **kwargs)[0]


def atomic_write_json(path: str | os.PathLike, data: Any) -> None:
    atomic_write_text(path, dumps_json(data, indent=2))


def append_jsonl(path: str | os.PathLike, records: list[Any], sync: bool = True) -> int:
    """Append records (dicts or attrs instances) as JSON lines, flushed to disk (a crash loses at most the
    line being written); with `sync=False` flushed to the OS only (a killed process loses nothing, a
    machine crash may). Returns how many non-finite numbers were written as null."""
    if not records:
        return 0
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines, nonfinite = [], 0
    for record in records:
        line, n = json_line(record)
        lines.append(line)
        nonfinite += n
    with naming(path), open(path, "a") as f:
        f.write("".join(lines))
        f.flush()
        if sync:
            os.fsync(f.fileno())
    return nonfinite


def fsync_file(path: str | os.PathLike) -> None:
    """Flush what was written to `path` (by any process) to disk; nothing when it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path: str | os.PathLike, skipped: list[int] | None = None) -> list[dict[str, Any]]:
    """The records of a JSON-lines file, skipping a line that is not JSON (a last line cut short by a
    crash); the numbers (from 1) of the lines skipped are appended to `skipped` when given."""
    out = []
    p = Path(path)
    if not p.exists():
        return out
    for number, line in enumerate(p.read_text().splitlines(), start=1):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if skipped is not None and line.strip():
                skipped.append(number)
    return out


def _json_default(obj: Any) -> Any:
    if attrs.has(type(obj)):  # one level: the encoder walks the values
        return attrs.asdict(obj, recurse=False)
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def make_folder(path: Path, option: str) -> None:
    """`path` and its parents, made; a folder that cannot be made is a ConfigError naming `option`."""
    from unstable_core.errors import ConfigError

    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"{option} {str(path)!r} cannot be created ({exc.strerror}): give a writable folder"
        ) from None
