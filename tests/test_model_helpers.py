"""The model helpers skip cleanly where the peers are missing: in a test and at a module's top level.

A module-level skip without allow_module_level is a collection error, which stops the whole suite on
a core install (the README's test command in a fresh environment without torch)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MODULE = '''
from tests.model_helpers import require_peers

require_peers("a_package_that_is_not_installed")


def test_never_runs() -> None:
    raise AssertionError("the module should have been skipped")
'''


def test_require_peers_skips_a_whole_module(tmp_path: Path) -> None:
    (tmp_path / "test_needs_a_peer.py").write_text(MODULE)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                          str(tmp_path / "test_needs_a_peer.py")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 5, run.stdout + run.stderr  # 5: no test collected, the module was skipped
    assert "1 skipped" in run.stdout and "error" not in run.stdout.lower()
