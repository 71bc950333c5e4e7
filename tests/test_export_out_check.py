"""`export --out` is checked before any work: a destination that cannot be written is one line and exit 2 at once.

Issue 36: `export --out /proc/plab.gguf` loaded SmolLM2 and quantized it for 60 s before `error: cannot write`.
The model here is one that does not exist: a command that got as far as loading it would fail with another
message, so the message itself shows the check came first.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

NO_MODEL = "./no-such-model.gguf"  # loading it would fail with "no such model file or directory"


def refused(run_cli, out: str, *extra: str) -> str:  # type: ignore[no-untyped-def]
    began = time.perf_counter()
    result = run_cli("export", "--model", NO_MODEL, "--scheme", "gguf_q4_0", "--to", "gguf", "--out", out, *extra)
    seconds = time.perf_counter() - began
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --out "), result.stderr
    assert "no such model" not in lines[0]
    assert seconds < 5, seconds  # loosely: the check is milliseconds; loading and quantizing took a minute
    return lines[0]


def test_proc_is_refused_before_loading(run_cli) -> None:  # type: ignore[no-untyped-def]
    line = refused(run_cli, "/proc/plab.gguf")
    assert line == ("error: --out /proc/plab.gguf: cannot write there: creating a file in /proc failed "
                    "(no such file or directory)")


def test_a_folder_to_be_made_under_proc_is_refused(run_cli) -> None:  # type: ignore[no-untyped-def]
    line = refused(run_cli, "/proc/precisionlab/new/plab.gguf")
    assert "creating a file in /proc failed" in line  # the nearest folder that exists is what is probed


@pytest.mark.skipif(not Path("/sys").is_dir(), reason="needs /sys (Linux)")
def test_a_read_only_file_system_is_refused(run_cli) -> None:  # type: ignore[no-untyped-def]
    """sysfs refuses new files even to root, like a read-only mount."""
    line = refused(run_cli, "/sys/plab.gguf")
    assert line.startswith("error: --out /sys/plab.gguf: cannot write there: creating a file in /sys failed (")


def test_a_read_only_folder_is_refused(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("running as root: permission bits do not stop root (the /proc and /sys cases still run)")
        line = refused(run_cli, str(folder / "m.gguf"))
        assert line.endswith(f"creating a file in {folder} failed (permission denied)"), line
    finally:
        folder.chmod(0o755)


def test_a_file_where_a_folder_is_expected(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "plain").write_text("x")
    out = tmp_path / "plain" / "m.gguf"
    line = refused(run_cli, str(out))
    assert line == f"error: --out {out}: {tmp_path / 'plain'} is a file, not a folder to write into"


def test_a_compressed_tensors_folder_is_checked_the_same_way(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("export", "--model", NO_MODEL, "--scheme", "int4:g64", "--to", "compressed-tensors", "--out",
                     "/proc/plab-ct")
    assert result.exit_code == 2
    assert result.stderr.strip() == ("error: --out /proc/plab-ct: cannot write there: creating a file in /proc "
                                     "failed (no such file or directory)")


def test_a_writable_destination_passes_and_leaves_nothing(tmp_path: Path) -> None:
    from precisionlab.cli.common import check_writable

    check_writable(tmp_path / "m.gguf")
    check_writable(tmp_path / "new" / "deeper" / "m.gguf")  # folders still to be made: probed where they would be
    assert list(tmp_path.iterdir()) == []  # the probe file is gone, and no folder was made


def test_a_writable_out_goes_on_to_the_model(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("export", "--model", NO_MODEL, "--scheme", "gguf_q4_0", "--to", "gguf", "--out",
                     str(tmp_path / "m.gguf"))
    assert result.exit_code == 2 and "no such model file or directory" in result.stderr, result.stderr
