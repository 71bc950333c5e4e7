"""The README's set-up commands and .ci/run never drift apart.

The README's Set-up section holds two command lines (indented code); .ci/run must run exactly
those lines, the first in the fresh environment before any optional peer is installed and the
second after the peers. The pins of torch in .ci/run and .ci/constraints.txt must agree.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CI_RUN = ROOT / ".ci" / "run"
CONSTRAINTS = ROOT / ".ci" / "constraints.txt"


def readme_setup_lines() -> list[str]:
    """The command lines (4-space indented code) of the README's `## Set-up` section, in order."""
    text = (ROOT / "README.md").read_text()
    match = re.search(r"^## Set-up\n(.*?)(?=^## )", text, re.S | re.M)
    assert match, "README.md has no '## Set-up' section"
    return [line[4:].rstrip() for line in match.group(1).splitlines() if line.startswith("    ") and line.strip()]


def ci_code_lines() -> list[str]:
    """.ci/run without comments and blank lines (a line in a comment is not a line that runs)."""
    return [line.strip() for line in CI_RUN.read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def ci_readme_assignments() -> dict[str, str]:
    found = {}
    for line in ci_code_lines():
        m = re.fullmatch(r"(README_[A-Z_]+)='([^']*)'", line)
        if m:
            found[m.group(1)] = m.group(2)
    return found


def test_the_readme_setup_has_the_two_command_lines() -> None:
    lines = readme_setup_lines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("pip install -e . && ") and "precisionlab run" in lines[0]
    assert lines[1].startswith('pip install -e ".[test]" && ') and "pytest" in lines[1]


def test_ci_runs_the_readme_lines_exactly_in_order_around_the_peer_install() -> None:
    lines = readme_setup_lines()
    assigned = ci_readme_assignments()
    assert list(assigned.values()) == lines, "the README_* lines of .ci/run differ from the README's Set-up lines"
    code = ci_code_lines()
    calls = [i for i, line in enumerate(code) if re.fullmatch(r'readme_line "\$README_[A-Z_]+"', line)]
    called = [re.search(r"README_[A-Z_]+", code[i]).group(0) for i in calls]  # type: ignore[union-attr]
    core, tests = list(assigned)
    assert called == [core, tests, tests], (f".ci/run must run the core line, then the test line without the peers "
                                            f"and again with them; it runs {called}")
    venv = next(i for i, line in enumerate(code) if "-m venv" in line)
    peers = next(i for i, line in enumerate(code) if line == "install_peers")
    assert venv < calls[0] < calls[1] < peers < calls[2], \
        "core line and the tests in the fresh venv before the peers; the tests again after them"


def test_ci_pins_torch_the_same_way_in_peers_and_constraints() -> None:
    peers = re.search(r'^PEERS="\n(.*?)^"', CI_RUN.read_text(), re.S | re.M)
    assert peers
    rows = [line.split() for line in peers.group(1).splitlines() if line.strip()]
    pinned = {row[0].split("==")[0]: row[0] for row in rows}
    assert {"torch", "triton", "torchao"} <= set(pinned)
    assert all("==" in requirement for requirement in pinned.values()), "every CI peer is pinned"
    constraints = [line.strip() for line in CONSTRAINTS.read_text().splitlines()
                   if line.strip() and not line.startswith("#")]
    assert pinned["torch"] in constraints
    for line in constraints:
        name = line.split("==")[0]
        if name in pinned:
            assert pinned[name] == line, f"{name}: .ci/run says {pinned[name]}, constraints.txt says {line}"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_ci_script_parses_and_a_readme_line_that_fails_or_collects_no_tests_fails(tmp_path: Path) -> None:
    assert CI_RUN.stat().st_mode & 0o111, ".ci/run must be executable"
    assert subprocess.run(["bash", "-n", str(CI_RUN)]).returncode == 0

    def line(command: str) -> subprocess.CompletedProcess[str]:
        script = f'CI_LIB_ONLY=1 . "{CI_RUN}"; checkout="{tmp_path}"; readme_line \'{command}\'; echo survived'
        return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)

    ok = line("true && echo ran")
    assert ok.returncode == 0 and "ran" in ok.stdout and "survived" in ok.stdout
    first_fails = line("false && echo ran")  # `set -e` alone would let a failing left side of && pass
    assert first_fails.returncode != 0 and "survived" not in first_fails.stdout
    no_tests = line("true && exit 5")
    assert no_tests.returncode != 0 and "survived" not in no_tests.stdout
    assert "collected no tests" in no_tests.stderr
    here = line("pwd")
    assert here.stdout.splitlines()[1] == str(tmp_path)  # run from the checkout copy's root
