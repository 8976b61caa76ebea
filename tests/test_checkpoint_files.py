"""Checkpoint folders: written whole, flushed to disk before they appear, never missing on a re-save."""

import os

import pytest

from unstable_core.learners import checkpoint
from unstable_core.learners.checkpoint import read_json, write_folder_atomically, write_json


def fill_with(value):
    def fill(folder):
        (folder / "sub").mkdir()
        write_json(folder / "learner_state.json", {"v": value})
        (folder / "sub" / "weights.bin").write_bytes(b"w" * 10)

    return fill


def test_files_and_folders_are_fsynced_before_the_rename(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(
        os, "fsync", lambda fd: events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))) or real_fsync(fd)
    )
    monkeypatch.setattr(os, "replace", lambda a, b: events.append(("replace", str(b))) or real_replace(a, b))
    final = tmp_path / "step-1"
    write_folder_atomically(final, fill_with(1))
    synced = [path for kind, path in events if kind == "fsync"]
    rename = events.index(("replace", str(final)))
    before = [p for kind, p in events[:rename] if kind == "fsync"]
    tmp = str(tmp_path / "step-1.tmp")
    assert {tmp + "/learner_state.json", tmp + "/sub/weights.bin", tmp + "/sub", tmp} <= set(before)
    assert synced[-1] == str(tmp_path)  # the parent, after the rename: the new entry is on disk
    assert read_json(final / "learner_state.json") == {"v": 1}


def test_resaving_a_step_never_leaves_it_missing(tmp_path, monkeypatch):
    """After every rename of a re-save, the step's folder is there, complete."""
    final = tmp_path / "step-2"
    write_folder_atomically(final, fill_with(1))
    missing_after = []
    real_replace = os.replace

    def checked_replace(a, b):
        real_replace(a, b)
        if not (final / "learner_state.json").is_file():
            missing_after.append((str(a), str(b)))

    monkeypatch.setattr(os, "replace", checked_replace)
    for v in range(2, 5):
        write_folder_atomically(final, fill_with(v))
    assert not missing_after
    assert read_json(final / "learner_state.json") == {"v": 4}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-2"]


def test_without_atomic_exchange_a_crash_between_renames_is_recovered(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint, "exchange", lambda a, b: False)
    final = tmp_path / "step-3"
    write_folder_atomically(final, fill_with(1))
    real_replace = os.replace

    def crash_after_first_rename(a, b):
        real_replace(a, b)
        if str(b).endswith(".old"):
            raise KeyboardInterrupt("crash between the renames")

    monkeypatch.setattr(os, "replace", crash_after_first_rename)
    with pytest.raises(KeyboardInterrupt):
        write_folder_atomically(final, fill_with(2))
    monkeypatch.setattr(os, "replace", real_replace)
    assert not final.exists()
    assert read_json(final / "learner_state.json") == {"v": 1}  # the last complete folder, put back
    write_folder_atomically(final, fill_with(3))
    assert read_json(final / "learner_state.json") == {"v": 3}
