"""What each PTQ method applies to, checked over the quant library's whole scheme registry.

The registry (`registry_schemes`): every preset with each option it takes, and every element at every
granularity with each option alone (the parser drops the combinations it refuses), plus every signed
P3109 format of 8 bits or fewer. For every scheme:

- GPTQ either reproduces `quant.quantize` bit for bit with H = I (no error moves between columns: it
  must be round-to-nearest; also with act-order over a diagonal H, on every element and preset), or refuses it
  with a ValueError, and the refused ones are exactly those the rule below names (derived here from the
  scheme's text, not from the code under test);
- AWQ's and SmoothQuant's stored weights are `quant.quantize` of the scaled weight, bit for bit;
- LLM.int8() and KIVI take only their own spellings.
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pytest

from precisionlab.formats.p3109 import parse_p3109
from precisionlab.ptq.activations import InputStatistics, LayerOutputError
from precisionlab.ptq.awq import quantize_layer, rescale, unscale
from precisionlab.ptq.gptq import gptq_quantize
from precisionlab.ptq.smoothquant import w8a8_output
from precisionlab.ptq.support import METHODS, check_method, refusal
from precisionlab.quant import quantize
from precisionlab.quant.diagnostics import QuantizationWarning
from precisionlab.quant.scheme import ELEMENTS, PRESETS, parse_scheme

GRANULARITIES = ("", "row", "col", "g32", "g48", "block4x32", "tile1x32")
OPTIONS = ("", "sym", "asym", "scale=fp32", "scale=fp16", "scale=bf16", "scale=ue8m0", "scale=e4m3", "min=fp16",
           "min=bf16", "min=fp32", "range=full", "range=full_neg", "scaleround=up", "outliers=1", "axis=0",
           "nonfinite=nan")
PRESET_OPTIONS = ("", "axis=0", "nonfinite=nan", "rceil", "minscale=normal", "scaleround=up")
SHAPE = (10, 64)  # 10 rows: a short last block of 4; 64 columns: g48 pads its last group


def p3109_elements() -> list[str]:
    """Every signed P3109 format binary<K>p<P>se|sf of K <= 8 bits that parses as a scheme element."""
    names = []
    for k in range(3, 9):
        for p in range(1, k):
            for suffix in ("se", "sf"):
                name = f"binary{k}p{p}{suffix}"
                if parse_p3109(name) is None:
                    continue
                try:
                    parse_scheme(name)
                except ValueError:
                    continue
                names.append(name)
    return names


def registry_schemes() -> list[str]:
    """The canonical text of every scheme the registry spells (module docstring), each once."""
    texts = [f"{preset}:{o}" if o else preset for preset in PRESETS for o in PRESET_OPTIONS]
    texts += [":".join(p for p in (e, g, o) if p) for e in ELEMENTS for g in GRANULARITIES for o in OPTIONS]
    texts += [f"{e}:{g}" if g else e for e in p3109_elements() for g in ("", "g32", "block4x32")]
    seen: dict[str, None] = {}
    for text in texts:
        try:
            seen.setdefault(str(parse_scheme(text)))
        except ValueError:
            continue
    return list(seen)


REGISTRY = registry_schemes()
pytestmark = pytest.mark.filterwarnings("ignore::precisionlab.quant.diagnostics.QuantizationWarning")


@pytest.fixture(autouse=True)
def one_torch_thread():  # type: ignore[no-untyped-def]
    """GPTQ factorises each (64, 64) Hessian through torch when it is installed; on a busy machine torch's
    thread pool costs more than the work, so these many small factorisations run on one thread."""
    try:
        import torch
    except ImportError:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def weight(shape: tuple[int, int] = SHAPE, seed: int = 3) -> np.ndarray:
    """A seeded weight with the blocks that take the rules' special paths: an all-zero group, a group of one
    repeated value (a flat block under min=), one of all-positive values, and an outlier."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal(shape) * 0.05).astype(np.float32)
    w[0, :32] = 0.0
    w[1, 32:64] = np.float32(0.0371)
    w[2, 32:64] = np.abs(w[2, 32:64]) + np.float32(0.01)
    w[3, 5] = np.float32(0.9)
    return w


def expected_gptq_refusal(text: str) -> str | None:
    """GPTQ's rule, read off the scheme text: which families the column sweep cannot reproduce."""
    parts = text.split(":")
    if any(p.startswith("axis=") and p not in ("axis=-1", "axis=1") for p in parts):
        return "axis"
    if any(p.startswith("outliers=") for p in parts):
        return "outliers="
    if parts[0] in ("gguf_q4_k", "gguf_q6_k"):
        return "super-block"
    return None


def rtn(w: np.ndarray, scheme: str):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", QuantizationWarning)
        return quantize(w, scheme)


def assert_same(q, r, what: str) -> None:  # type: ignore[no-untyped-def]
    assert np.array_equal(q.packed, r.packed), f"{what}: codes"
    assert np.array_equal(q.scale_values, r.scale_values, equal_nan=True), f"{what}: scales"
    for field in ("zero_points", "min_values"):
        a, b = getattr(q, field), getattr(r, field)
        assert (a is None) == (b is None) and (a is None or np.array_equal(a, b)), f"{what}: {field}"
    assert q.tensor_scale == r.tensor_scale and q.two_level is None, f"{what}: tensor scale"
    assert q.nbytes == r.nbytes, f"{what}: bytes"
    assert np.array_equal(q.dequantize(), r.dequantize()), f"{what}: values"


def test_the_registry_covers_every_family() -> None:
    schemes = {parse_scheme(t) for t in REGISTRY}
    assert {s.preset for s in schemes} >= set(PRESETS)
    assert {s.element for s in schemes} >= set(ELEMENTS)
    assert any(s.has_min for s in schemes) and any(s.has_zero_point for s in schemes)
    assert any(s.is_mx for s in schemes) and any(s.tensor_scale for s in schemes)
    assert any(s.element.startswith("binary") for s in schemes)
    assert len(REGISTRY) > 1000


def test_gptq_with_an_identity_hessian_is_round_to_nearest_or_refused_over_the_whole_registry() -> None:
    w = weight()
    n = w.shape[1]
    diagonal = np.diag(np.random.default_rng(0).uniform(0.5, 2.0, n))  # act_order visits a permuted order
    accepted, refused, failures = 0, 0, []
    for text in REGISTRY:
        want = expected_gptq_refusal(text)
        got = refusal("gptq", text)
        if (want is None) != (got is None) or (want is not None and want not in str(got)):
            failures.append(f"{text}: expected refusal {want!r}, rule says {got!r}")
            continue
        try:
            reference = rtn(w, text)
        except ValueError:
            reference = None  # the scheme cannot store this shape: GPTQ must refuse it too
        if got is not None or reference is None:
            with pytest.raises(ValueError):
                gptq_quantize(w, np.eye(n), text, act_order=False, static_groups=False)
            refused += 1
            continue
        variants = [(np.eye(n), {"act_order": False, "static_groups": False})]  # groups fitted on arrival
        if ":" not in text or parse_scheme(text).preset is not None:  # act-order on every element and preset
            variants.append((diagonal, {"act_order": True, "static_groups": True}))
        for h, kwargs in variants:
            result = gptq_quantize(w, h, text, **kwargs)
            assert result.status == "ok" and result.quantized is not None and result.weight is not None
            try:
                assert_same(result.quantized, reference, f"{text} {kwargs}")
                assert np.array_equal(result.weight, reference.dequantize()), f"{text} {kwargs}: weight"
            except AssertionError as exc:
                failures.append(str(exc))
        accepted += 1
    assert not failures, f"{len(failures)} schemes: " + "; ".join(failures[:10])
    assert accepted > 1000 and refused > 100


@pytest.mark.parametrize("scheme", ["uint4:g32:min=fp16", "gguf_q4_1", "gguf_q5_1", "gguf_q4_0", "gguf_q8_0",
                                    "uint4:g32:min=bf16:scale=bf16", "uint8:g48:min=fp32"])
def test_gptq_beats_round_to_nearest_on_float_minimum_and_gguf_grids(scheme: str) -> None:
    """The grids the column sweep used to model wrongly: with a real Hessian GPTQ is now below RTN, and its
    stored tensor reads back as the weight it reports."""
    from tests.test_ptq_gptq import fixed_layer, layer_error

    w, h = fixed_layer()
    result = gptq_quantize(w, h, scheme)
    assert result.quantized is not None and result.weight is not None
    assert np.array_equal(result.quantized.dequantize(), result.weight)
    assert layer_error(w, result.weight, h) < 0.95 * layer_error(w, quantize(w, scheme).dequantize(), h)


@pytest.mark.parametrize(("scheme", "message"), [
    ("gguf_q4_k", "super-block"), ("gguf_q6_k", "super-block"), ("int4:g32:axis=0", "axis"),
    ("int4:g32:outliers=1", "outliers="),
])
def test_gptq_refuses_what_it_cannot_sweep_in_one_line(scheme: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        check_method("gptq", scheme)
    assert "\n" not in str(caught.value) and str(parse_scheme(scheme)) in str(caught.value)


def test_awq_stores_quantize_of_the_scaled_weight_over_the_whole_registry() -> None:
    w = weight()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, w.shape[1])).astype(np.float32)
    stats = InputStatistics(w.shape[1])
    stats.add(x)
    columns = np.exp(rng.uniform(-1, 1, w.shape[1]))
    rows = np.exp(rng.uniform(-1, 1, w.shape[0]))
    failures = []
    for text in REGISTRY:
        assert refusal("awq", text) is None, text
        try:
            reference = rtn(w, text)
        except ValueError:
            continue
        s = parse_scheme(text)
        error = LayerOutputError(w, stats)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", QuantizationWarning)
            plain, plain_eff, _ = quantize_layer(w, s, None, None, error, clip=False)
            clip = ":" not in text or s.preset is not None  # the clipping search on every element and preset
            folded, folded_eff, _ = quantize_layer(w, s, columns, rows, error, clip=clip, name="up_proj")
            expected = None
            with contextlib.suppress(ValueError):
                expected = rtn(rescale(w, columns, rows), text)
        try:
            assert_same(plain, reference, f"{text} unscaled")
            assert np.array_equal(plain_eff, reference.dequantize().astype(np.float64)), text
            assert np.array_equal(folded_eff, unscale(folded.dequantize(), columns, rows)), f"{text}: effective"
            if expected is not None and not np.array_equal(folded.packed, expected.packed):
                # clipping won: the stored weight is quantize of the clipped folded weight, on the same grid
                assert folded.nbytes == expected.nbytes and folded.scheme == expected.scheme, text
        except AssertionError as exc:
            failures.append(str(exc))
    assert not failures, f"{len(failures)} schemes: " + "; ".join(failures[:10])


EIGHT_BIT = ("int8", "uint8", "e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz")


def test_smoothquant_takes_exactly_the_eight_bit_elements_and_stores_their_grid() -> None:
    w = weight()
    x = np.random.default_rng(2).standard_normal((16, w.shape[1])).astype(np.float32)
    for text in REGISTRY:
        s = parse_scheme(text)
        eight = s.element in EIGHT_BIT or s.element.startswith("binary8")
        reason = refusal("smoothquant", text)
        assert (reason is None) == eight, f"{text}: {reason}"
        if reason is not None:
            assert "8-bit" in reason or "W8A8" in reason, text
            continue
        act = parse_scheme(f"{s.element}:row")
        try:
            wq = rtn(w, text).dequantize().astype(np.float64)
        except ValueError:
            continue
        xq = rtn(x, str(act)).dequantize().astype(np.float64)
        assert np.array_equal(w8a8_output(x, w, s, act), xq @ wq.T), text


def test_llm_int8_and_kivi_take_only_their_own_spellings() -> None:
    for text in REGISTRY:
        assert (refusal("llm_int8", text) is None) == (text in ("int8", "int8:row", "int8:row:scale=fp32")), text
        assert (refusal("kivi", text) is None) == (text in ("int4", "uint4", "int2", "uint2")), text
    assert refusal("kivi", "4") is None and refusal("kivi", "2") is None
    assert "bit width" in str(refusal("kivi", "int4:g128"))
    assert refusal("llm_int8", None) is None and refusal("kivi", None) is None


def test_every_method_has_a_rule_and_rtn_takes_every_scheme() -> None:
    assert all(refusal("rtn", text) is None for text in REGISTRY)
    for method in METHODS:
        assert refusal(method, "nonsense") is not None
