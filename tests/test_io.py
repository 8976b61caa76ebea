"""Run files: a write that fails on an open file (no file name in the OS's error) still names its file."""

import os

import pytest

from unstable_core.errors import describe
from unstable_core.io import append_jsonl, naming


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_failed_append_names_its_file():
    with pytest.raises(OSError) as info:
        append_jsonl("/dev/full", [{"a": 1}], sync=False)  # the open succeeds, the flush finds no space
    assert info.value.filename == "/dev/full"
    assert describe(info.value) == "/dev/full: No space left on device (OSError)"


def test_an_error_that_names_a_file_or_has_no_errno_is_kept(tmp_path):
    named = PermissionError(1, "Operation not permitted", "/elsewhere")
    with pytest.raises(PermissionError) as info, naming(tmp_path / "f"):
        raise named
    assert info.value is named
    with pytest.raises(OSError) as bare, naming(tmp_path / "f"):
        raise OSError("no errno")
    assert bare.value.filename is None
    with pytest.raises(PermissionError) as unnamed, naming(tmp_path / "f"):
        raise PermissionError(1, "Operation not permitted")
    assert unnamed.value.filename == str(tmp_path / "f") and unnamed.value.errno == 1
