"""One folder writer for the report, the compressed-tensors export and the model cache (_atomic.atomic_directory):
the folder is replaced whole, a failure anywhere leaves the target as it was and nothing beside it, a failed swap
puts the previous folder back, and the new folder gets the mode mkdir() gives (checked against a plain mkdir)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from precisionlab._atomic import atomic_directory, default_directory_mode, default_mode


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_new_folder_is_swapped_in_with_the_mode_mkdir_gives(tmp_path: Path) -> None:
    target = tmp_path / "a" / "out"
    with atomic_directory(target) as stage:
        assert stage.parent == target.parent and stage.name.startswith(".out.staging-") and not target.exists()
        (stage / "f.txt").write_text("new")
    assert snapshot(target) == {"f.txt": b"new"}
    plain = tmp_path / "plain"
    plain.mkdir()  # the independent source of the mode: what mkdir gives under this umask
    assert stat.S_IMODE(target.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode) == default_directory_mode()
    assert sorted(p.name for p in target.parent.iterdir()) == ["out"]
    handle = tmp_path / "new.txt"
    handle.write_text("")
    assert default_mode() == stat.S_IMODE(handle.stat().st_mode)


def test_an_existing_folder_is_replaced_whole(tmp_path: Path) -> None:
    target = tmp_path / "out"
    (target / "sub").mkdir(parents=True)
    (target / "old.txt").write_text("old")
    (target / "sub" / "x").write_text("x")
    with atomic_directory(target) as stage:
        (stage / "new.txt").write_text("new")
        assert snapshot(target) == {"old.txt": b"old", "sub/x": b"x"}  # untouched while the new one is written
    assert snapshot(target) == {"new.txt": b"new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no stage, no previous left beside it


@pytest.mark.parametrize("error", [KeyboardInterrupt, ValueError])
def test_an_error_while_writing_leaves_the_target_as_it_was(tmp_path: Path, error: type[BaseException]) -> None:
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with pytest.raises(error), atomic_directory(target) as stage:
        (stage / "half.txt").write_text("half")
        raise error()
    assert snapshot(target) == {"old.txt": b"old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_failed_swap_puts_the_previous_folder_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_text("old")
    real = os.rename

    def rename(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if ".staging-" in Path(src).name:  # moving the new folder in fails (after the old one was moved aside)
            raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError) as refused, atomic_directory(target) as stage:
        (stage / "new.txt").write_text("new")
    assert refused.value.strerror == f"cannot write to {target}: No space left on device"  # what the CLI prints
    assert snapshot(target) == {"old.txt": b"old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_target_that_cannot_be_created_is_named(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    target = tmp_path / "afile" / "out"  # its parent is a file
    with pytest.raises(OSError) as refused, atomic_directory(target):
        pytest.fail("the block ran")
    assert refused.value.strerror.startswith(f"cannot write to {target}: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
