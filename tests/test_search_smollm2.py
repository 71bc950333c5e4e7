"""The issue's bar on SmolLM2-135M (slow: minutes): at 6 bits per weight with int4:g128, int8:row and bf16, the
recipe stays within the budget, its perplexity increase is below uniform int4:g128's (the dearest uniform format
within the budget) in the same run, and it minimises the reported sensitivities under the budget (checked by
scipy's MILP on the reported numbers alone). Two blocks keep it to a few minutes on a CPU; docs/search.md has
the ten-block run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.model_helpers import require_packaged, require_peers

pytestmark = pytest.mark.slow


def milp_optimum(findings: dict[str, Any], formats: list[str], budget: float) -> float:
    """The least summed sensitivity under the budget, by scipy.optimize.milp on the findings alone."""
    optimize = pytest.importorskip("scipy.optimize")
    units = sorted({k[len("search.bytes."):].rsplit(".", 1)[0] for k in findings
                    if k.startswith("search.bytes.") and k.endswith(f".{formats[-1]}")})
    elements = sum(findings[f"search.bytes.{u}.bf16"] // 2 for u in units)
    values = np.array([findings[f"search.sensitivity.{u}.{f}"] for u in units for f in formats])
    costs = np.array([[findings[f"search.bytes.{u}.{f}"] for u in units for f in formats]], dtype=np.float64)
    n, k = len(units), len(formats)
    one = np.zeros((n, n * k))
    for i in range(n):
        one[i, i * k:(i + 1) * k] = 1
    result = optimize.milp(values, integrality=np.ones(n * k), bounds=optimize.Bounds(0, 1),
                           constraints=[optimize.LinearConstraint(costs, -np.inf, budget * elements / 8),
                                        optimize.LinearConstraint(one, 1, 1)], options={"mip_rel_gap": 0})
    assert result.success, result.message
    return float(result.fun)


def test_the_bar_on_smollm2(run_cli: Any, tmp_path: Path) -> None:
    require_peers("gguf")
    require_packaged("smollm2-135m")
    formats = ["int4:g128", "int8:row", "bf16"]
    result = run_cli("search", "-m", "smollm2-135m", "-f", ",".join(formats), "--budget", "6", "--blocks", "14,15",
                     "--uniform", "int4:g128", "--size", "0.25", "--calib-size", "256", "--json", "--out",
                     str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    f = json.loads(result.stdout)["findings"]
    assert f["search.bits_per_weight"] <= 6.0
    assert f["search.best_uniform"] == "int4:g128"
    assert f["search.difference"] < f["search.uniform.int4:g128.difference"]
    assert f["search.predicted_kl"] == pytest.approx(milp_optimum(f, formats, 6.0), rel=1e-7)
