"""Task-level evaluation with paired statistics: built-in and user tasks, scoring, confidence
intervals and verdicts against a threshold declared before the run.

torch and transformers are imported lazily, inside the functions that need them.
"""
