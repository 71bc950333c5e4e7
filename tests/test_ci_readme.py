"""The README's set-up commands and .ci/run never drift apart.

The README's Set-up section holds two command lines (indented code); .ci/run must run exactly
those lines, the first in the fresh environment before any optional peer is installed and the
second after the peers. The pins of torch in .ci/run and .ci/constraints.txt must agree.

torch for the CPU: every install line (README, docs, the CLI's hints) is PyTorch's documented CPU-only one, and
dry runs with none of this machine's pip settings (no local wheels) show that it resolves to the CPU build and
that the `models` extra keeps it; each skips, saying why, where its index cannot be reached.
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


# ---- torch for the CPU: one install line everywhere, and it resolves on the public indexes alone ------------------

TORCH_LINE = re.compile(r"pip install torch\S*(?: [^`\n#|]*)?")


def torch_install_mentions() -> dict[str, list[str]]:
    """Every `pip install torch...` command in the README, docs/ and pyproject.toml, by file (up to a closing
    backquote, a comment, a table bar or the line's end)."""
    files = [ROOT / "README.md", ROOT / "pyproject.toml", *sorted((ROOT / "docs").glob("*.md"))]
    found: dict[str, list[str]] = {}
    for path in files:
        lines = [m.group(0).strip() for m in TORCH_LINE.finditer(path.read_text())]
        if lines:
            found[path.name] = lines
    return found


def test_every_torch_install_line_is_the_cpu_index_one() -> None:
    """The README, the docs, pyproject's comment and every hint the CLI prints give PyTorch's documented CPU-only
    line (its CPU wheel index); the extra, the constraints and CI's peer pin the same version."""
    from precisionlab.peers import INSTALL_HINTS, TORCH_CPU_INDEX, TORCH_HINT, TORCH_INSTALL, TORCH_VERSION

    expected = f"pip install torch=={TORCH_VERSION} --index-url https://download.pytorch.org/whl/cpu"
    assert expected == TORCH_INSTALL
    mentions = torch_install_mentions()
    assert "README.md" in mentions and "eval.md" in mentions
    for name, lines in mentions.items():
        for line in lines:
            assert line.startswith(TORCH_INSTALL), f"{name}: {line!r} is not {TORCH_INSTALL!r}"
    assert INSTALL_HINTS["torch"] == TORCH_INSTALL and TORCH_HINT.startswith(TORCH_INSTALL)
    pyproject = (ROOT / "pyproject.toml").read_text()
    models = re.search(r"^models = \[(.*?)\]", pyproject, re.S | re.M)
    assert models and f'"torch=={TORCH_VERSION}"' in models.group(1)
    assert f"torch=={TORCH_VERSION}" in CONSTRAINTS.read_text().split()
    peers = re.search(r'^PEERS="\n(.*?)^"', CI_RUN.read_text(), re.S | re.M)
    assert peers
    torch_row = next(line.split() for line in peers.group(1).splitlines() if line.startswith("torch=="))
    assert torch_row == [f"torch=={TORCH_VERSION}", "torch", "--index-url", TORCH_CPU_INDEX]


def test_every_torch_hint_in_the_source_is_the_constant() -> None:
    """No module spells its own torch install line (they drifted: `pip install torch`, `torch==2.13.0 'precisionlab
    [models]'`): each uses precisionlab.peers.TORCH_INSTALL."""
    spelled = [f"{path.relative_to(ROOT)}: {line.strip()}"
               for path in sorted((ROOT / "src" / "precisionlab").rglob("*.py"))
               for line in path.read_text().splitlines()
               if "pip install torch" in line and "TORCH_INSTALL" not in line and path.name != "peers.py"]
    assert not spelled, spelled


def reachable(url: str) -> str | None:
    """None when the index answers, else why not."""
    import urllib.request

    try:
        urllib.request.urlopen(url, timeout=15).close()
    except Exception as exc:  # DNS, TLS, proxy, HTTP errors: all mean the dry run cannot tell anything here
        return f"{type(exc).__name__}: {exc}"
    return None


def clean_pip_env() -> dict[str, str]:
    """The environment without this machine's pip settings: PIP_CONFIG_FILE=/dev/null skips every pip.conf (its
    find-links to local wheels, extra local indexes, global constraints), and no PIP_* variable survives."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def dry_run(args: list[str], tmp_path: Path, python: str | None = None) -> list[dict[str, str]]:
    """What `pip install ARGS` would install, from the public indexes alone: [{name, version, url}]."""
    import json
    import sys

    report = tmp_path / "report.json"
    target = ["--python", python] if python else []
    command = [sys.executable, "-m", "pip", "--isolated", *target, "install", "--dry-run", "--quiet",
               "--report", str(report), *([] if python else ["--ignore-installed"]), *args]
    done = subprocess.run(command, cwd=ROOT, env=clean_pip_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{' '.join(args)}: {done.stderr[-2000:]}"
    return [{"name": item["metadata"]["name"].lower(), "version": item["metadata"]["version"],
             "url": item["download_info"]["url"]} for item in json.loads(report.read_text())["install"]]


def readme_torch_line() -> list[str]:
    import shlex

    line = next(line for line in torch_install_mentions()["README.md"])
    words = shlex.split(line)
    assert words[:2] == ["pip", "install"]
    return words[2:]


def test_the_readme_torch_line_resolves_to_the_cpu_build_on_the_public_index(tmp_path: Path) -> None:
    """The README's torch line, with none of this machine's pip settings, installs the CPU build: 2.13.0+cpu from
    PyTorch's index, no CUDA libraries (nvidia-*) and no triton (PyPI's torch==2.13.0 brings cuDNN, NCCL, cuBLAS
    and triton 3.7.1). This machine reaches PyPI but not download.pytorch.org: the test skips, saying so."""
    from precisionlab.peers import TORCH_CPU_INDEX, TORCH_VERSION

    why = reachable(f"{TORCH_CPU_INDEX}/torch/")
    if why:
        pytest.skip(f"PyTorch's CPU wheel index is not reachable from here ({why}); the dry run needs it")
    installed = dry_run(readme_torch_line(), tmp_path)
    torch = next(item for item in installed if item["name"] == "torch")
    assert torch["version"] == f"{TORCH_VERSION}+cpu" and torch["url"].startswith("https://download.pytorch.org/")
    assert not [item["name"] for item in installed if item["name"].startswith(("nvidia-", "triton", "cuda-"))]


def test_the_models_extra_keeps_the_cpu_torch_on_the_public_index(tmp_path: Path) -> None:
    """The README's second model line, `pip install -e ".[models]"`, after the CPU torch: resolved on PyPI alone
    in an environment that holds torch 2.13.0+cpu (its metadata only), it installs transformers and the rest and
    leaves torch alone (a pin the CPU build did not meet, or a peer wanting a newer torch, would pull PyPI's CUDA
    build in)."""
    import sys

    from precisionlab.peers import TORCH_VERSION

    why = reachable("https://pypi.org/simple/pip/")
    if why:
        pytest.skip(f"PyPI is not reachable from here ({why}); the dry run needs it")
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    python = str(env / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    info = Path(site) / f"torch-{TORCH_VERSION}+cpu.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {TORCH_VERSION}+cpu\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("")
    readme = (ROOT / "README.md").read_text()
    assert 'pip install -e ".[models]"' in readme
    installed = dry_run(["-e", ".[models]"], tmp_path, python=python)
    names = {item["name"] for item in installed}
    assert {"transformers", "accelerate", "gguf", "tokenizers", "precisionlab"} <= names
    assert "torch" not in names and not [n for n in names if n.startswith(("nvidia-", "cuda-"))], sorted(names)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_ci_installs_torch_from_the_cpu_index_or_says_why_not() -> None:
    """.ci/run's index check: yes for an index that answers, no (with the reason) for one that does not exist."""
    script = (f'CI_LIB_ONLY=1 . "{CI_RUN}"; if index_reachable https://nonexistent.invalid/simple/; then echo yes; '
              'else echo no; fi')
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "no" and "https://nonexistent.invalid/simple/ is not reachable" in done.stderr
