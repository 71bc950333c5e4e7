"""One export, written whole: checked first, planned, written to a staging path, moved into place, verified.

    precheck(spec, to, recipe, out, force)     the checks that need no loaded model (one-line ValueError)
    export_model(loaded, recipe, to, out)      install, plan, write, verify; the model's weights restored after
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from precisionlab._atomic import atomic_directory
from precisionlab.export.results import Recipe

FORMATS = ("gguf", "compressed-tensors")


@dataclass
class ExportResult:
    to: str
    path: Path
    recipe: Recipe
    records: list[Any]
    verification: Any | None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    float_dtype: str = "auto"

    def findings(self) -> dict[str, Any]:
        """export.* keys (docs/export.md)."""
        v = self.verification
        quantized = [r for r in self.records if r.how == "quantized"]
        out: dict[str, Any] = {
            "export.format": self.to, "export.path": str(self.path), "export.source": self.recipe.description,
            "export.float_dtype": self.float_dtype, "export.tensors": len(self.records),
            "export.quantized_tensors": len(quantized), "export.seconds": self.seconds,
        }
        types: dict[str, int] = {}
        for r in self.records:
            types[r.kind] = types.get(r.kind, 0) + 1
        for kind, count in sorted(types.items()):
            out[f"export.types.{kind}"] = count
        if v is not None:
            out.update({"export.bytes.file": v.file_bytes, "export.bytes.tensors": v.tensor_bytes,
                        "export.bytes.metadata": v.metadata_bytes, "export.bytes.quantized": v.quantized_bytes,
                        "export.bytes.quantized_predicted": v.predicted_quantized_bytes,
                        "export.bytes.quantized_match": v.quantized_bytes == v.predicted_quantized_bytes,
                        "export.verified": v.ok})
            for check in v.checks:
                key = "reader" if check is v.checks[0] else "transformers"
                out[f"export.verify.{key}.compared"] = check.compared
                out[f"export.verify.{key}.mismatched"] = len(check.mismatched)
        return out


def precheck(spec: str, to: str, recipe: Recipe, out: Path, force: bool) -> None:
    """What can be refused before the model loads: the format, the output path, each scheme against the format,
    the architecture and the layer widths (from the config), all as one-line ValueErrors."""
    if to not in FORMATS:
        raise ValueError(f"--to {to!r}: choose {' or '.join(FORMATS)}")
    if out.exists() and not force:
        raise ValueError(f"--out {out} exists; give --force to replace it")
    if to == "gguf" and out.exists() and out.is_dir():
        raise ValueError(f"--out {out} is a directory; a GGUF export is one file (e.g. {out / 'model.gguf'})")
    if to == "compressed-tensors" and out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; a compressed-tensors export is a directory")
    if to == "gguf" and out.suffix != ".gguf":
        raise ValueError(f"--out {out}: a GGUF file name ends in .gguf")
    schemes = _schemes(recipe)
    for scheme in schemes:
        _check_scheme(scheme, to)
    if to == "compressed-tensors" and len(schemes) > 1:
        raise ValueError(f"compressed-tensors: a mixed recipe ({', '.join(schemes)}) is not exported: transformers "
                         "could not load such a checkpoint back, so it would ship unverified; export it to GGUF, or "
                         "one scheme per layer group in separate runs")
    hparams = _source_hparams(spec)
    if hparams is None:
        return
    if to == "gguf":
        from precisionlab.interop.writers.gguf_meta import architecture

        architecture(hparams)
    if recipe.scheme is None or recipe.include or recipe.stored or recipe.layers:
        return  # which widths the layers have is known once the model is loaded (checked there, before writing)
    widths = _in_features(hparams)
    for scheme in schemes:
        _check_widths(scheme, to, widths)


def _schemes(recipe: Recipe) -> list[str]:
    if recipe.stored:
        return sorted({str(q.scheme) for q in recipe.stored.values()})
    if recipe.layers:
        return sorted(set(recipe.layers.values()))
    return [recipe.scheme] if recipe.scheme else []


def _check_scheme(scheme: str, to: str) -> None:
    if to == "gguf":
        from precisionlab.quant.ggml_types import ggml_type

        ggml_type(scheme)
    else:
        from precisionlab.interop.writers.compressed import ct_arguments

        ct_arguments(scheme)


def _source_hparams(spec: str) -> dict[str, Any] | None:
    """The model's config without loading it: config.json of a directory, a GGUF file's header (None for a hub
    id, whose config is not here)."""
    from precisionlab.models.loading import resolve

    source = resolve(spec)
    if source.form == "directory":
        try:
            data = json.loads((Path(source.location) / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{source.location}: cannot read config.json ({exc})") from None
        return data if isinstance(data, dict) else None
    if source.form == "gguf":
        return _gguf_hparams(Path(source.location))
    return None


def _gguf_hparams(path: Path) -> dict[str, Any] | None:
    try:
        import gguf  # noqa: F401 (without it, the widths are checked once the model is loaded)
    except ImportError:
        return None
    from precisionlab.interop.readers.gguf_file import open_reader

    reader = open_reader(path)  # a damaged file: one line naming it
    fields = reader.fields
    arch_field = fields.get("general.architecture")
    if arch_field is None:
        return None
    arch = arch_field.contents()
    names = {"qwen2": "qwen2", "llama": "llama"}
    out: dict[str, Any] = {"model_type": names.get(arch, f"gguf:{arch}")}
    for key, name in (("embedding_length", "hidden_size"), ("feed_forward_length", "intermediate_size"),
                      ("head_count", "num_attention_heads")):
        f = fields.get(f"{arch}.{key}")
        if f is not None:
            out[name] = int(f.contents())
    return out


def _in_features(hparams: dict[str, Any]) -> dict[str, int]:
    widths = {}
    for key in ("hidden_size", "intermediate_size"):
        if isinstance(hparams.get(key), int):
            widths[key] = int(hparams[key])
    return widths


def _check_widths(scheme: str, to: str, widths: dict[str, int]) -> None:
    from precisionlab.quant.scheme import Granularity, parse_scheme

    s = parse_scheme(scheme)
    if to == "gguf":
        block = s.super_block or (s.group if s.granularity is Granularity.GROUP else 0)
    else:
        block = s.group if s.granularity is Granularity.GROUP else 0
    for key, width in widths.items():
        if block and width % block:
            raise ValueError(f"{s}: the model's {key} is {width}, not a multiple of {block}: its layers' rows are not "
                             f"whole {'GGML blocks' if to == 'gguf' else 'groups'} (in_features {width})")


def export_model(loaded: Any, recipe: Recipe, to: str, out: str | Path, *, float_dtype: str = "auto",
                 force: bool = False, tokenizer_pre: str | None = None, verify: bool = True,
                 reload: bool = True, progress: Any = None) -> ExportResult:
    """Install the recipe, write the export whole, read it back; the model's own weights are restored after."""
    from precisionlab.export.plan import prepare

    start = time.perf_counter()
    target = Path(out)
    if target.exists() and not force:
        raise ValueError(f"--out {target} exists; give --force to replace it")
    note = progress.note if progress is not None else (lambda line: None)
    if to == "gguf":
        from precisionlab.export.gguf import check_gguf

        check_gguf(loaded, float_dtype, tokenizer_pre)
    prepared = prepare(loaded, recipe)
    try:
        note(f"installed {len(prepared.quantized)} quantized layers ({recipe.description})")
        if to == "gguf":
            from precisionlab.export import gguf as gguf_export
            from precisionlab.export.verify import verify_gguf

            plan = gguf_export.plan_gguf(prepared, float_dtype, tokenizer_pre)
            gguf_export.write(plan, target)
            note(f"wrote {target}")
            state = prepared.state()
            verification = verify_gguf(target, plan, state, reload) if verify else None
            records: list[Any] = list(plan.records)
            notes: list[str] = []
        elif to == "compressed-tensors":
            from precisionlab.export import compressed as ct_export
            from precisionlab.export.verify import verify_compressed

            ct_plan = ct_export.plan_compressed(prepared, float_dtype)
            with atomic_directory(target) as folder:  # written whole: a reader sees the old export or the new
                ct_export.write(ct_plan, prepared, folder)
            note(f"wrote {target}")
            state = prepared.state()
            verification = verify_compressed(target, ct_plan, state, reload) if verify else None
            records, notes = list(ct_plan.records), ct_plan.notes
        else:
            raise ValueError(f"--to {to!r}: choose {' or '.join(FORMATS)}")
    finally:
        prepared.restore()
    return ExportResult(to, target, recipe, records, verification, notes, time.perf_counter() - start, float_dtype)
