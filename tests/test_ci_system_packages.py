"""The system-package step of .ci/run (Chromium for the browser test) skips with a clear message
where it cannot run, and leaves the browser test optional there."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CI_RUN = Path(__file__).resolve().parents[1] / ".ci" / "run"


def run_step(tmp_path: Path, env_line: str) -> subprocess.CompletedProcess[str]:
    script = (f'CI_LIB_ONLY=1 . "{CI_RUN}"; {env_line} browser_installed=0; install_system_packages; '
              'echo "browser_installed=$browser_installed"')
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_step_names_the_packages_and_can_be_skipped(tmp_path: Path) -> None:
    assert 'SYSTEM_PACKAGES="chromium chromium-driver"' in CI_RUN.read_text()
    skipped = run_step(tmp_path, "CI_NO_APT=1;")
    assert skipped.returncode == 0
    assert "skipping apt-get install chromium chromium-driver (CI_NO_APT=1)" in skipped.stdout
    assert "browser_installed=0" in skipped.stdout


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_without_apt_get_the_step_says_so(tmp_path: Path) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("id", "env"):  # a PATH with no apt-get on it
        found = shutil.which(tool)
        if found:
            (bare / tool).symlink_to(found)
    result = run_step(tmp_path, f'PATH="{bare}";')
    assert result.returncode == 0, result.stderr
    assert "apt-get not found" in result.stdout and "browser_installed=0" in result.stdout


def test_selenium_is_a_ci_peer() -> None:
    peers = CI_RUN.read_text().split('PEERS="', 1)[1].split('"', 1)[0]
    assert any(line.split()[:2] == ["selenium==4.51.0", "selenium"] for line in peers.splitlines() if line.strip())
