"""Task-level evaluation with paired statistics: built-in and user tasks, scoring, confidence
intervals and verdicts against a threshold declared before the run.

    run = runner.evaluate(loaded, candidates, tasks, max_drop)               # in this process
    run = runner.evaluate(loaded, candidates, tasks, max_drop, workers=2)    # candidates on 2 processes
    run = runner.evaluate(..., scheduler="tcp://host:8786")                  # or a Dask cluster (eval.workers)

The reference's outputs are cached per model, data, scoring settings and runtime (library versions, torch
threads, attention implementation, dtype, device: eval.reference); the reference and every candidate run with
one recorded torch thread count, and the distributed runs equal the serial one bit for bit.

torch and transformers are imported lazily, inside the functions that need them.
"""
