"""Lab results as data, and their renderers (terminal, JSON, HTML, PNG)."""

from precisionlab.results import Figure, LabResult, Scalar, Series, Table, jsonable

__all__ = ["Figure", "LabResult", "Scalar", "Series", "Table", "jsonable"]
