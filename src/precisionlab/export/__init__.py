"""Ship what was evaluated: the model's weights as the evaluation used them, in GGUF or compressed-tensors,
verified by reading the file back with the ecosystem's own readers (docs/export.md).

    from precisionlab.export import export_model, read_result
    recipe = read_result("out/ptq.json")                     # or Recipe(scheme="gguf_q4_0", ...)
    result = export_model(loaded, recipe, "gguf", "model-q4_0.gguf")
    result.verification.ok, result.findings()

Modules: results (--from readers), candidate (a saved result as an eval candidate), plan (installing the
evaluated weights), gguf / compressed (the two formats), verify (loading back), run (the whole export, whole
or nothing). torch, transformers, gguf and compressed-tensors are imported lazily.
"""

from precisionlab.export.candidate import recipe_candidate, result_candidate
from precisionlab.export.results import Recipe, read_result, result_reader, write_recipe
from precisionlab.export.run import FORMATS, ExportResult, export_model, precheck

__all__ = ["FORMATS", "ExportResult", "Recipe", "export_model", "precheck", "read_result", "recipe_candidate",
           "result_candidate", "result_reader", "write_recipe"]
