"""The bar on the real model (slow: minutes each): SmolLM2-135M exported at gguf_q4_0 / gguf_q8_0 reads back
through gguf's dequantizer and transformers equal to the evaluated weights, its perplexity as the reference
equals the emulated candidate's; e4m3:row and int4:g128 (the layers whose rows are whole groups of 128) to
compressed-tensors load in transformers equal to the emulation; the converter's tokenizer hash names SmolLM2's
tokenizer "smollm" (which also checks the transcription of the converter's check text)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.model_helpers import require_packaged, require_peers

pytestmark = pytest.mark.slow
require_peers("gguf", "compressed_tensors")


@pytest.fixture(scope="module")
def smollm2():  # type: ignore[no-untyped-def]
    require_packaged("smollm2-135m")
    from precisionlab.models import load_model

    return load_model("smollm2-135m")


@pytest.mark.parametrize("scheme", ["gguf_q4_0", "gguf_q8_0"])
def test_gguf_export_and_perplexity(smollm2, tmp_path, scheme) -> None:  # type: ignore[no-untyped-def]
    import gguf

    from precisionlab.eval.candidates import Candidate
    from precisionlab.eval.runner import evaluate
    from precisionlab.eval.tasks import resolve_tasks
    from precisionlab.export import Recipe, export_model
    from precisionlab.models import load_model

    out = tmp_path / f"{scheme}.gguf"
    result = export_model(smollm2, Recipe("scheme", scheme, scheme=scheme), "gguf", out)
    assert result.verification.ok
    v = result.verification
    assert v.quantized_bytes == v.predicted_quantized_bytes
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(out)).tensors}
    assert types["token_embd.weight"] == "Q8_0"  # the source's tied embedding, copied as it was
    specs = resolve_tasks(["ppl"], "causal-lm", size=0.25)
    source = evaluate(smollm2, [Candidate(scheme)], specs, 1.0, cache=False)
    exported = load_model(str(out), cache=False)
    back = evaluate(exported, [Candidate(scheme)], specs, 1.0, cache=False)
    candidate_ppl = source.tasks[0].outcomes[0].metrics["ppl"]
    reference_ppl = back.tasks[0].reference["ppl"]
    assert abs(reference_ppl - candidate_ppl) <= 1e-6 * candidate_ppl


def test_compressed_tensors_export(smollm2, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import torch
    import transformers

    from precisionlab.export import Recipe, export_model
    from precisionlab.models.weights import quantized_weights

    for scheme, include in (("e4m3:row", ()), ("int4:g128", ("*down_proj",))):
        out = tmp_path / scheme.replace(":", "_")
        result = export_model(smollm2, Recipe("scheme", scheme, scheme=scheme, include=include), "compressed-tensors",
                              out)
        assert result.verification.ok
        back = transformers.AutoModelForCausalLM.from_pretrained(
            str(out), dtype=torch.float32, quantization_config=transformers.CompressedTensorsConfig(dequantize=True))
        theirs = back.state_dict()
        with quantized_weights(smollm2.model, scheme, include):
            for name, p in smollm2.model.named_parameters():
                assert np.array_equal(theirs[name].numpy().view(np.uint32), p.detach().numpy().view(np.uint32)), name


def test_the_converter_hash_names_smollm2s_tokenizer(smollm2) -> None:  # type: ignore[no-untyped-def]
    from precisionlab.interop.writers.gguf_meta import pre_tokenizer

    assert pre_tokenizer(smollm2.tokenizer) == "smollm"
