"""The per-layer format search under a byte budget (`precisionlab search`).

    units        the model's weight layers, grouped where a runtime needs one format (q/k/v)
    costs        exact bytes of a layer in a format (the quant library's accounting)
    sensitivity  the direct KL measure per (unit, format) on calibration tokens, and the one-backward proxy
    solver       the exact multiple-choice knapsack (sparse dynamic programming over the byte grid)
    workers      the sensitivity pass as independent tasks (process pool or Dask)
    recipes      a recipe as an evaluation candidate, recipe.json in and out
    run          the orchestration: solve at the budget and along the frontier, evaluate every point

Importing this package imports no torch; the model parts import it when they run.
"""

from precisionlab.search.costs import FLOAT_FORMATS, format_bytes, parse_formats
from precisionlab.search.solver import InfeasibleBudget, Solution, brute_force, solve

__all__ = ["FLOAT_FORMATS", "InfeasibleBudget", "Solution", "brute_force", "format_bytes", "parse_formats", "solve"]
