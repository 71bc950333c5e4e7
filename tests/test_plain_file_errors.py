"""A missing saved result and a damaged GGUF file are one plain line each, naming the file and what is wrong.

Issue 36: `eval --from nosuch.json` printed `error: '--from': --from nosuch.json: no such file (see ...)`, and
a GGUF file of 100 bytes ended in numpy's own words (`When changing to a larger dtype, its size must be a
divisor of the total size in bytes of the last axis of the array.`), in audit, eval, export and
read_checkpoint alike.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.model_helpers import require_packaged

NUMPY_WORDS = ("dtype", "array", "reshape", "buffer", "mmap", "divisor", "axis")
"""Wording of numpy, mmap and struct that must not reach a user."""


def one_line(result, text: str) -> str:  # type: ignore[no-untyped-def]
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("loading ")]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and text in lines[0], lines[0]
    assert "Traceback" not in result.output and "internal error" not in result.output
    return lines[0]


def test_a_missing_saved_result_is_no_such_file(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("eval", "--from", "nosuch.json")
    assert one_line(result, "nosuch.json") == "error: no such file: nosuch.json"


def test_a_folder_given_as_a_saved_result(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    line = one_line(run_cli("eval", "--from", str(tmp_path)), str(tmp_path))
    assert line.startswith(f"error: --from {tmp_path}: a directory; give the saved result inside it")
    assert line.count("--from") == 1


def test_a_bad_parameter_names_its_option_once_without_quotes(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    line = one_line(run_cli("eval", "--from", str(bad)), str(bad))
    assert line.startswith(f"error: --from {bad}: not a result export reads"), line
    assert "'--from'" not in line and line.count("--from") == 1
    assert one_line(run_cli("eval", "--threads", "0"), "--threads") == (
        "error: --threads: must be a positive integer, got 0 (see `precisionlab eval --help`)")


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """SmolLM2's GGUF file cut to 100 bytes (the issue's file), a small whole GGUF file (gguf's own writer) cut in
    half, an 8-byte header, a text file named .gguf and an empty one."""
    pytest.importorskip("gguf")
    require_packaged("smollm2-135m")
    from precisionlab.models.packaged import packaged_path
    from tests.test_cli_model_input import write_gguf

    source = packaged_path("smollm2-135m")
    assert source is not None
    folder = tmp_path_factory.mktemp("damaged")
    with source.open("rb") as handle:
        head = handle.read(100)
    small = write_gguf(folder / "small.gguf").read_bytes()
    files = {"100 bytes": head, "half": small[:len(small) // 2], "8 bytes": head[:8], "text": b"hello\n",
             "empty": b""}
    out = {"whole": folder / "small.gguf"}
    for name, content in files.items():
        path = folder / f"{name.replace(' ', '_')}.gguf"
        path.write_bytes(content)
        out[name] = path
    return out


def expected(name: str, files: dict[str, Path]) -> str:
    """What the message must say is wrong with each file. The counts come from gguf's reader of the whole files
    (SmolLM2's header: 272 tensors, 33 metadata entries); the least size is 24 header bytes, 13 per metadata entry
    (key length u64, an empty key, type u32, one u8 value) and 32 per tensor (name length u64, an empty name, the
    dimension count u32, one dimension u64, type u32, offset u64), added up by hand."""
    import gguf

    prefix = "not a readable GGUF file: "
    if name == "100 bytes":
        return prefix + ("truncated: 100 bytes, while its header announces 272 tensors and 33 metadata entries, "
                         f"which take at least {24 + 13 * 33 + 32 * 272:,}")
    if name == "half":
        whole = gguf.GGUFReader(files["whole"])
        size = files["half"].stat().st_size
        tensors, entries = len(whole.tensors), int(whole.fields["GGUF.kv_count"].contents())
        return prefix + (f"truncated or corrupt: {size:,} bytes; its header announces {tensors} tensors and "
                         f"{entries} metadata entries, and they cannot all be read from it")
    return prefix + {"8 bytes": "truncated: 8 bytes, fewer than the 24 of its header",
                     "text": "it does not begin with the 4 bytes 'GGUF' (not a GGUF file at all)",
                     "empty": "the file is empty"}[name]


def test_read_checkpoint_names_the_file_and_the_damage(damaged: dict[str, Path]) -> None:
    import precisionlab as pl

    for name, path in damaged.items():
        if name == "whole":
            continue
        with pytest.raises(ValueError) as caught:
            pl.read_checkpoint(path)
        message = str(caught.value)
        assert message == f"{path}: {expected(name, damaged)}", (name, message)
        assert not any(word in message for word in NUMPY_WORDS), message


@pytest.mark.parametrize("command", [
    ["audit"], ["eval", "--schemes", "int8:row", "--tasks", "ppl", "--model"],
    ["export", "--scheme", "gguf_q4_0", "--to", "gguf", "--out", "x.gguf", "--model"]])
def test_every_command_says_it_in_one_line(run_cli, damaged: dict[str, Path], command: list[str]) -> None:  # type: ignore[no-untyped-def]
    for name in ("100 bytes", "text"):
        path = damaged[name]
        line = one_line(run_cli(*command, str(path)), str(path))
        assert line.endswith(f"{path}: {expected(name, damaged)}"), line
        assert not any(word in line for word in NUMPY_WORDS), line
