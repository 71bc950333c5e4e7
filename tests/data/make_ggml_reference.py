"""Regenerate ggml_kquant_reference.npz: llama.cpp's own K-quant quantizers on fixed inputs (run by hand).

gguf-py has no quantizer for Q4_K / Q6_K, so their expected blocks come from llama.cpp's C reference,
`quantize_row_q4_K_ref` and `quantize_row_q6_K_ref` in ggml/src/ggml-quants.c, compiled here as a small
shared library and called through ctypes. The source is the ggml copy inside the ggml-python 0.0.45 sdist
(ggml 0.15.3, synced from llama.cpp ded1561b4228495daa58342ffc111ff172ec86ac):

    pip download --no-deps --no-binary :all: ggml-python==0.0.45 -d /tmp/ggml && tar xzf /tmp/ggml/*.tar.gz -C /tmp/ggml
    python tests/data/make_ggml_reference.py /tmp/ggml/ggml_python-0.0.45/vendor/ggml

It is compiled as ISO C11 without fused multiply-add (`-std=c11`, which turns GCC's contraction off), the
strict float32 semantics of the C source. The script also builds the library as llama.cpp's CMake does on
an FMA machine (`-std=gnu11 -march=native`: GCC contracts a*b + c into an FMA) and prints how many
dequantized elements that build's blocks change, which is why the tests pin the uncontracted build.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
OUT = HERE / "ggml_kquant_reference.npz"
TYPES = {"Q4_K": ("quantize_row_q4_K_ref", 144), "Q6_K": ("quantize_row_q6_K_ref", 210)}
STUBS = """
#include <stddef.h>
#include <stdlib.h>
void ggml_abort(const char * file, int line, const char * fmt, ...) { (void)file; (void)line; (void)fmt; abort(); }
size_t ggml_row_size(int type, long ne) { (void)type; (void)ne; abort(); }
const char * ggml_type_name(int type) { (void)type; return "?"; }
size_t ggml_type_size(int type) { (void)type; abort(); }
"""


def inputs() -> np.ndarray:
    """Rows of 512 (two super-blocks each): weight-like, heavy-tailed, one-signed, integer-valued (ties),
    large, tiny, offset, and hand-made edge cases."""
    rng = np.random.default_rng(20250101)
    parts = [
        rng.standard_normal((4, 512)) * 0.02,
        rng.standard_t(2, (3, 512)) * 0.01,
        rng.random((2, 512)),
        -3 * rng.random((2, 512)),
        rng.integers(-8, 8, (2, 512)).astype(np.float64),
        rng.standard_normal((1, 512)) * 1e4,
        rng.standard_normal((1, 512)) * 1e-6,
        1 + 0.01 * rng.standard_normal((2, 512)),
    ]
    edge = rng.standard_normal((6, 512)) * 0.02
    edge[0, :64] = 0.0                       # all-zero sub-blocks
    edge[0, 256:] = 0.0                      # an all-zero super-block
    edge[1, :32] = 0.5                       # a constant sub-block
    edge[1, 256:] = 1e-30                    # a super-block below ggml's 1e-15 group floor
    edge[2, :16] = 1e-20
    edge[2, 300:316] = -0.0
    edge[3, :] = np.repeat(rng.standard_normal(32), 16)  # constant 16s
    edge[4, 10] = 1.5                        # one outlier
    edge[4, 400] = -2.0
    edge[5, ::7] = 0.0
    parts.append(edge)
    return np.concatenate(parts).astype(np.float32)


def build(ggml: Path, work: Path, name: str, flags: list[str]) -> ctypes.CDLL:
    (work / "stubs.c").write_text(STUBS)
    lib = work / f"libq_{name}.so"
    subprocess.run(["gcc", *flags, "-O2", "-DNDEBUG", "-fPIC", "-shared", f"-I{ggml / 'include'}",
                    f"-I{ggml / 'src'}", str(ggml / "src" / "ggml-quants.c"), str(work / "stubs.c"), "-lm",
                    "-o", str(lib)], check=True, capture_output=True)
    return ctypes.CDLL(str(lib))


def quantize(lib: ctypes.CDLL, x: np.ndarray, type_name: str) -> np.ndarray:
    function, type_size = TYPES[type_name]
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    out = np.zeros(flat.size // 256 * type_size, dtype=np.uint8)
    getattr(lib, function)(flat.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p),
                           ctypes.c_int64(flat.size))
    return out.reshape(x.shape[0], -1)


def main(ggml: Path) -> None:
    import gguf

    x = inputs()
    with tempfile.TemporaryDirectory() as tmp:
        strict = build(ggml, Path(tmp), "strict", ["-std=c11"])
        fused = build(ggml, Path(tmp), "fused", ["-std=gnu11", "-march=native"])
        blocks = {t: quantize(strict, x, t) for t in TYPES}
        for t in TYPES:
            qtype = gguf.GGMLQuantizationType[t]
            a = gguf.quants.dequantize(blocks[t], qtype)
            b = gguf.quants.dequantize(quantize(fused, x, t), qtype)
            print(f"{t}: the FMA-contracted build changes {int((a != b).sum())} of {a.size} dequantized elements")
    np.savez_compressed(OUT, x=x, **{t.lower(): b for t, b in blocks.items()})
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
