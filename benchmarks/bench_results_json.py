"""Reading a saved lab result back (what `precisionlab run --include` does per file), against json.loads alone.

    python3 benchmarks/bench_results_json.py [--repeat 5] [--layers 210]

Results: a fabricated ptq result over --layers layers (210: SmolLM2-135M's linears, about 1700
findings) and the limits lab at its quick size (12 tables, 3 figures). For each, after checking that the round trip
gives the same dict again (from_dict(to_dict(r)).to_dict() == to_dict(r)):
  json.loads            the peer and the floor: parsing the file's text, nothing else
  json.loads+from_dict  LabResult.from_dict on top: type checks, non-finite spellings, dataclasses
  to_dict+dumps         what writing the file costs (for scale)
Prints milliseconds (best of --repeat) and the ratio (json.loads+from_dict) / json.loads.
Nothing is asserted: timings on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import json
import os

from _timing import best_of
from precisionlab.labs import get_lab
from precisionlab.labs.ptq import ptq_lab
from precisionlab.ptq.run import LayerRecord, PTQResult
from precisionlab.results import LabResult

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def big_ptq(layers: int) -> LabResult:
    records = [LayerRecord(name=f"model.layers.{i // 7}.{LINEARS[i % 7]}", shape=(576, 576),
                           output_error=0.01 + i * 1e-5, rtn_output_error=0.02, eval_output_error=0.011,
                           rtn_eval_output_error=0.021, seconds=0.5, peak_mb=30.0, tokens=2048,
                           details={"damping": 0.01, "damping_tries": 1, "dead_columns": 0})
               for i in range(layers)]
    result = PTQResult(method="gptq", scheme="int4:g128", layers=records, calibration_tokens=2048,
                       evaluation_tokens=1024, seconds=300.0, peak_mb=900.0)
    return ptq_lab(result, {"model": "smollm2-135m", "method": "gptq", "scheme": "int4:g128"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--layers", type=int, default=210)
    args = parser.parse_args()
    limits = get_lab("limits")
    results = {f"ptq, {args.layers} layers": big_ptq(args.layers), "limits lab (quick)": limits.run(**limits.quick)}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"best of {args.repeat}; measured under load (load average {load:.2f})")
    print(f"{'result':<22} {'KiB':>7} {'findings':>8} {'json.loads':>11} {'+from_dict':>11} {'ratio':>6} "
          f"{'to_dict+dumps':>14}")
    for name, result in results.items():
        data = result.to_dict()
        text = json.dumps(data, indent=2, allow_nan=False)
        same = LabResult.from_dict(json.loads(text)).to_dict() == data
        if not same:
            print(f"{name}: the round trip changed the result; not timed")
            continue
        parse = best_of(lambda: json.loads(text), args.repeat)  # noqa: B023
        read = best_of(lambda: LabResult.from_dict(json.loads(text)), args.repeat)  # noqa: B023
        write = best_of(lambda: json.dumps(result.to_dict(), indent=2, allow_nan=False), args.repeat)  # noqa: B023
        print(f"{name:<22} {len(text) / 1024:7.0f} {len(result.findings):8d} {parse * 1e3:9.2f}ms "
              f"{read * 1e3:9.2f}ms {read / parse:5.1f}x {write * 1e3:12.2f}ms")


if __name__ == "__main__":
    main()
