"""The IEEE P3109 family as formats: names, defining fields, codes and limits against the draft's own
formulas (IEEE P3109 interim report / draft specification, section 4), ml_dtypes' two members, the refused
members, and the family through the command line and the quantization grammar.

The draft's formulas, for width K, precision P, signed (s) or unsigned (u), extended (e) or finite (f):
    bias          2^(K-P-1) signed, 2^(K-P) unsigned
    NaN code      2^(K-1) signed, 2^K - 1 unsigned
    +inf code     2^(K-1) - 1 signed extended, 2^K - 2 unsigned extended; -inf 2^K - 1 (signed)
    maxFinite     2^(K-1) - 2 (se), 2^(K-1) - 1 (sf), 2^K - 3 (ue), 2^K - 2 (uf)
    decode        x = t + 2^(P-1) e: e == 0 -> t 2^(1-P) 2^(1-bias), else (1 + t 2^(1-P)) 2^(e-bias)
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import precisionlab as pl
from precisionlab.formats import Encoding, FloatFormat, p3109_format, p3109_formats

FAMILY = [f for width in range(2, 11) for f in p3109_formats(width)]


def precision(fmt: FloatFormat) -> int:
    return fmt.man_bits + 1


def draft_value(fmt: FloatFormat, magnitude_code: int) -> Fraction:
    """The draft's decode of a non-negative, non-special code."""
    p, bias = precision(fmt), draft_bias(fmt)
    t, e = magnitude_code % 2 ** (p - 1), magnitude_code // 2 ** (p - 1)
    if e == 0:
        return t * Fraction(2) ** (1 - p) * Fraction(2) ** (1 - bias)
    return (1 + t * Fraction(2) ** (1 - p)) * Fraction(2) ** (e - bias)


def draft_bias(fmt: FloatFormat) -> int:
    k, p = fmt.bits, precision(fmt)
    return 2 ** (k - p - 1) if fmt.signed else 2 ** (k - p)


@pytest.mark.parametrize("fmt", FAMILY, ids=[f.name for f in FAMILY])
def test_codes_and_limits_follow_the_drafts_formulas(fmt: FloatFormat) -> None:
    k = fmt.bits
    assert fmt.bias == draft_bias(fmt)
    nan = 2 ** (k - 1) if fmt.signed else 2**k - 1
    max_code = {(True, True): 2 ** (k - 1) - 2, (True, False): 2 ** (k - 1) - 1,
                (False, True): 2**k - 3, (False, False): 2**k - 2}[(fmt.signed, fmt.extended)]
    assert fmt.max_finite_exact == draft_value(fmt, max_code)
    assert fmt.min_subnormal_exact == draft_value(fmt, 1)
    values = pl.decode(np.arange(fmt.code_count), fmt)
    specials = {nan}
    if fmt.extended:
        specials |= {2 ** (k - 1) - 1, 2**k - 1} if fmt.signed else {2**k - 2}
        assert values[2 ** (k - 1) - 1 if fmt.signed else 2**k - 2] == np.inf
        if fmt.signed:
            assert values[2**k - 1] == -np.inf
    assert np.isnan(values[nan]) and np.isnan(values).sum() == 1  # one NaN
    assert (values == 0).sum() == 1 and not np.signbit(values[values == 0]).any()  # one zero, +0
    half = 2 ** (k - 1) if fmt.signed else 2**k
    for code in range(half):
        if code not in specials:
            assert Fraction(float(values[code])) == draft_value(fmt, code), code
            if fmt.signed and code:
                assert values[code + half] == -values[code]
    assert pl.encode(np.nan, fmt) == nan


@pytest.mark.parametrize(("name", "canonical"), [
    ("binary8p3se", "binary8p3se"), ("binary8p3", "binary8p3se"), ("p3109_k8p3", "binary8p3se"),
    ("p3109_k8p3se", "binary8p3se"), ("P3109-K8P3SE", "binary8p3se"), ("Binary8P1UE", "binary8p1ue"),
    ("binary8p1u", "binary8p1ue"), ("binary8p5f", "binary8p5sf"), ("p3109_k6p2uf", "binary6p2uf"),
    ("binary8p8u", "binary8p8ue"), ("binary16p11se", "binary16p11se")])
def test_names(name: str, canonical: str) -> None:
    assert pl.get_format(name).name == canonical
    assert pl.get_format(name) == pl.get_format(canonical)


def test_the_ml_dtypes_members_are_the_registered_fnuz_formats() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    for name, registered, peer in (("binary8p4sf", "e4m3fnuz", "float8_e4m3fnuz"),
                                   ("binary8p3sf", "e5m2fnuz", "float8_e5m2fnuz"),
                                   ("p3109_k8p4sf", "e4m3fnuz", "float8_e4m3fnuz")):
        fmt = pl.get_format(name)
        assert fmt is pl.get_format(registered)
        assert p3109_format(8, fmt.man_bits + 1, signed=True, extended=False).defining_fields == fmt.defining_fields
        codes = np.arange(256, dtype=np.uint8)
        with np.errstate(invalid="ignore"):
            theirs = codes.view(getattr(ml_dtypes, peer)).astype(np.float64)
        np.testing.assert_array_equal(pl.decode(codes, name), theirs)
    # float8_e4m3b11fnuz has bias 11; P3109's E4M3 layout (binary8p4) has bias 8
    assert pl.get_format("binary8p4sf").bias == 8 != float(ml_dtypes.finfo(ml_dtypes.float8_e4m3b11fnuz).max) / 30


@pytest.mark.parametrize(("name", "reason"), [
    ("binary8p8s", "only the unsigned format has it"), ("binary2p1se", "no finite number but zero"),
    ("binary2p2ue", "no normal number"), ("binary17p3", "from 2 to 16"), ("binary1p1", "from 2 to 16"),
    ("binary8p9u", "from 1 to K = 8"), ("binary8p0", "from 1 to K = 8"),
    ("binary12p1se", "does not fit inside float64"), ("binary8", "P3109 formats are binary<K>p<P>")])
def test_refused_names_say_why(name: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        pl.get_format(name)


def test_the_refused_ones_are_left_out_of_the_family() -> None:
    names = {f.name for f in p3109_formats(2)}
    assert names == {"binary2p1sf", "binary2p1ue", "binary2p1uf", "binary2p2uf"}
    assert len(p3109_formats(8)) == 7 * 2 + 8 * 2
    assert len(p3109_formats(16)) == 40  # K - P >= 11 (signed) or K - P + 1 >= 11 (unsigned) overflow float64


def test_the_custom_grammar_spells_extended_and_unsigned_layouts() -> None:
    assert pl.get_format("e5m2fnuzinf").defining_fields == pl.get_format("binary8p3se").defining_fields
    assert pl.get_format("ue6m2b32fninf").defining_fields == pl.get_format("binary8p3ue").defining_fields
    assert pl.get_format("ue1m7b1fn").defining_fields == pl.get_format("binary8p8uf").defining_fields
    variant = pl.get_format("binary8p3se", bias=20)
    assert (variant.name, variant.extended, variant.has_inf) == ("e5m2b20fnuzinf", True, True)
    assert pl.get_format(variant.name) == variant
    assert not pl.get_format("binary8p3se", extended=False).has_inf
    for spec in ("e5m2inf", "e5m2ieeeinf", "e2m1finiteinf"):
        with pytest.raises(ValueError, match="needs the fn or fnuz encoding"):
            pl.get_format(spec)


def test_extended_is_a_defining_field() -> None:
    finite, extended = pl.get_format("binary8p3sf"), pl.get_format("binary8p3se")
    assert finite.defining_fields != extended.defining_fields
    assert (finite.encoding, extended.encoding) == (Encoding.FNUZ, Encoding.FNUZ)
    assert (finite.max_finite, extended.max_finite) == (57344.0, 49152.0)
    assert (extended.inf_code, extended.max_finite_code) == (0x7F, 0x7E)
    assert pl.get_format("binary8p1ue").inf_code == 0xFE and pl.get_format("fp16").inf_code == 0x7C00
    with pytest.raises(ValueError, match="has no infinity"):
        _ = finite.inf_code
    with pytest.raises(ValueError, match="extended must be a bool"):
        FloatFormat("x", 5, 2, 16, Encoding.FNUZ, extended="yes")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- through the CLI and quant
def test_formats_tabulates_the_family(run_cli) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(run_cli("formats", "p3109", "binary4p2ue", "e4m3", "--json").output)
    rows = {row[0]: dict(zip(data["sections"][0]["columns"], row, strict=True)) for row in data["sections"][0]["rows"]}
    assert len(rows) == 32 and rows["binary8p3se"]["max finite"] == 49152.0 and rows["e4m3"]["max finite"] == 448
    assert rows["binary8p3se"]["inf"] is True and rows["binary8p3sf"]["inf"] is False
    assert data["findings"]["max_finite.binary4p2ue"] == 6.0
    assert len(json.loads(run_cli("formats", "p3109:4", "--json").output)["sections"][0]["rows"]) == 14


def test_formats_codes_of_an_extended_format(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rows = json.loads(run_cli("formats", "--codes", "binary8p3se", "--json").output)["sections"][0]["rows"]
    by_code = {row[0]: row for row in rows}
    assert by_code["0x7f"][2:] == ["inf", "inf"] and by_code["0xff"][2:] == ["-inf", "inf"]
    assert by_code["0x80"][2:] == ["nan", "nan"] and by_code["0x7e"][2] == 49152.0
    assert by_code["0x01"][1:] == ["0|00000|01", 2.0**-17, "subnormal"]
    unsigned = json.loads(run_cli("formats", "--codes", "binary8p1ue", "--json").output)["sections"][0]["rows"]
    assert unsigned[0][1:] == ["00000000", 0.0, "zero"] and unsigned[254][2] == "inf" and unsigned[255][2] == "nan"


def test_explain_rounds_in_a_p3109_format(run_cli) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(run_cli("explain", "0.3", "-f", "binary8p3se", "--rounding", "TowardPositive", "--json").output)
    row = dict(zip(data["sections"][0]["columns"], data["sections"][0]["rows"][0], strict=True))
    assert (row["code"], row["stored"], row["below"], row["above"]) == ("0x39", 0.3125, 0.25, 0.3125)
    data = json.loads(run_cli("explain", "1e6", "-f", "binary8p3se", "--overflow", "SatFinite", "--json").output)
    assert data["findings"]["stored.binary8p3se"] == 49152.0
    decoded = json.loads(run_cli("explain", "0x80", "-f", "binary8p3se", "--json").output)
    assert decoded["findings"]["value"] == "nan"


@pytest.mark.parametrize(("args", "needle"), [
    (("formats", "binary8p8se"), "only the unsigned format has it"),
    (("formats", "p3109:x"), "p3109:<K>"),
    (("explain", "1", "-f", "binary2p1se"), "no finite number but zero"),
    (("explain", "1", "-f", "e4m3", "--overflow", "satnothing"), "unknown overflow policy"),
    (("quant", "save", "x.npy", "-s", "binary8p3ue", "-o", "q.safetensors"), "unsigned"),
])
def test_bad_p3109_input_is_one_line(run_cli, args: tuple[str, ...], needle: str) -> None:  # type: ignore[no-untyped-def]
    if args[0] == "quant":
        np.save("x.npy", np.ones((2, 32), dtype=np.float32))
    result = run_cli(*args)
    assert result.exit_code == 2 and needle in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_quant_grammar_takes_signed_p3109_elements() -> None:
    scheme = pl.parse_scheme("binary8p3se:g32")
    assert (scheme.element, str(scheme), scheme.is_float) == ("binary8p3se", "binary8p3se:g32", True)
    assert pl.parse_scheme("p3109_k8p4sf:row").element == "e4m3fnuz"  # the registered member
    assert pl.parse_scheme(str(pl.parse_scheme("p3109_k6p3"))) == pl.parse_scheme("binary6p3se")
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    q = pl.quantize(x, "binary8p3se:g32")
    scales = np.repeat(np.abs(x).reshape(4, 2, 32).max(axis=2) / 49152.0, 32, axis=1)
    expected = pl.round_to(x / scales.astype(np.float32), "binary8p3se") * scales.astype(np.float32)
    np.testing.assert_allclose(q.dequantize(), expected, rtol=1e-6)
    assert q.nbytes == 4 * 64 + 4 * 2 * 4  # one byte per element, an fp32 scale per group
    for bad, needle in (("binary8p3ue", "unsigned"), ("binary10p3se", "8 bits or fewer")):
        with pytest.raises(ValueError, match=needle):
            pl.parse_scheme(bad)
