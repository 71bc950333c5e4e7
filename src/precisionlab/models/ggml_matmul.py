"""llama.cpp's own matmul kernels, called one matmul at a time through the ggml libraries that
llama-cpp-python ships (ctypes; llama_cpp itself is never imported).

    mm = GgmlMatmul(weight, "Q4_0", m=1)      # weight (N, K) float32, quantized by ggml_quantize_chunk
    mm.set_input(x); mm.run(); mm.output()     # y = x W^T (M, N) float32
    mm.quantize_activations()                  # the activation conversion mul_mat does inside, on its own

What runs: `ggml_mul_mat(w, x)` on the CPU backend with one thread (`ggml_graph_compute_with_ctx`). For Q4_0
and Q8_0 weights the CPU backend first converts the float32 activations to Q8_0 blocks (32 values, an fp16
scale d = amax / 127, codes round(x / d)) and then takes integer dot products per block, scaled by
d_w * d_x: y = sum over blocks of fp32(d_w d_x) * sum(q_w q_x). `quantize_activations` runs that conversion
alone (a ggml_cpy of the activations into a Q8_0 tensor uses the same row converter), so its time is the
conversion share of a call. The weight's codes are llama.cpp's reference quantizer's, which precisionlab's
gguf_q4_0 / gguf_q8_0 emulate (tests/test_kernels_cpu_llamacpp.py checks them equal).

The ggml C API used (ggml.h / ggml-cpu.h of the library llama-cpp-python 0.3.36 bundles): ggml_init,
ggml_new_tensor_2d, ggml_get_data, ggml_nbytes, ggml_quantize_chunk, ggml_mul_mat, ggml_cpy, ggml_new_graph,
ggml_build_forward_expand, ggml_graph_compute_with_ctx, ggml_free, ggml_cpu_init, ggml_cpu_has_avx2 /
_avx512; tensor types by their enum values (F32 0, Q4_0 2, Q8_0 8).
"""

from __future__ import annotations

import ctypes
import functools
import importlib.metadata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from precisionlab.models.packaged import package_dir

GGML_TYPES = {"F32": 0, "Q4_0": 2, "Q8_0": 8}
BLOCK_BYTES = {"Q4_0": (32, 18), "Q8_0": (32, 34)}
"""Values and bytes per block: Q4_0 16 bytes of nibbles + an fp16 scale; Q8_0 32 int8 + an fp16 scale."""
CONTEXT_SLACK = 32 << 20
"""Bytes of a context beyond its tensors: tensor and graph records, the mul_mat work buffer."""
PACKAGE = "llama_cpp_python"


class _Params(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


@dataclass(frozen=True)
class Ggml:
    base: Any
    cpu: Any
    version: str

    def has(self, feature: str) -> bool:
        return bool(getattr(self.cpu, f"ggml_cpu_has_{feature}")())


def library_dir() -> Path | None:
    """The folder of llama-cpp-python's shared libraries, found without importing llama_cpp."""
    base = package_dir("llama_cpp")
    if base is None:
        return None
    lib = base / "lib"
    return lib if (lib / "libggml-base.so").exists() and (lib / "libggml-cpu.so").exists() else None


def missing_reason() -> str:
    """Why llama.cpp's kernels cannot be called ("" when they can)."""
    if library_dir() is None:
        return "llama-cpp-python is not installed (its ggml libraries are missing)"
    try:
        ggml()
    except OSError as exc:
        return f"llama-cpp-python's ggml libraries do not load ({exc})"
    return ""


@functools.cache
def ggml() -> Ggml:
    """The ggml libraries with the signatures used here; OSError when they cannot be loaded."""
    folder = library_dir()
    if folder is None:
        raise OSError("llama-cpp-python is not installed")
    base = ctypes.CDLL(str(folder / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
    cpu = ctypes.CDLL(str(folder / "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)
    p = ctypes.c_void_p
    i64 = ctypes.c_int64
    signatures = {
        (base, "ggml_init"): (p, [_Params]),
        (base, "ggml_new_tensor_2d"): (p, [p, ctypes.c_int, i64, i64]),
        (base, "ggml_get_data"): (p, [p]),
        (base, "ggml_nbytes"): (ctypes.c_size_t, [p]),
        (base, "ggml_quantize_chunk"): (ctypes.c_size_t, [ctypes.c_int, p, p, i64, i64, i64, p]),
        (base, "ggml_mul_mat"): (p, [p, p, p]),
        (base, "ggml_cpy"): (p, [p, p, p]),
        (base, "ggml_new_graph"): (p, [p]),
        (base, "ggml_build_forward_expand"): (None, [p, p]),
        (base, "ggml_free"): (None, [p]),
        (cpu, "ggml_cpu_init"): (None, []),
        (cpu, "ggml_graph_compute_with_ctx"): (ctypes.c_int, [p, p, ctypes.c_int]),
    }
    for (lib, name), (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    for feature in ("avx2", "avx512", "avx512_vnni"):
        getattr(cpu, f"ggml_cpu_has_{feature}").restype = ctypes.c_int
    cpu.ggml_cpu_init()
    try:
        version = importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return Ggml(base, cpu, version)


def output_bound(x: np.ndarray, emulated: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(y, bound): the exact y = x W_hat^T (float64; W_hat the emulated Q4_0 / Q8_0 weight) and an elementwise
    bound on ggml's deviation from it. ggml converts each block of 32 activations to Q8_0 with d = amax / 127:
    the codes round x / d to an integer (|error| <= d / 2, plus the float32 rounding of x * 127 / amax) and are
    multiplied by fp16(d) (|fp16(d) - d| <= 2^-11 d), so |x_q - x| <= (1/2 + 127 * 2^-11 + 2^-20) d = 0.5626 d
    per element; each block's exact integer dot product is then scaled by the exact fp32 product of the two
    fp16 scales and summed in fp32, one rounding per block:

        |y_ggml - y| <= sum_b 0.5626 d_b sum_{k in b} |w_k| + gamma_B sum_k (|x_k| + 0.5626 d_b) |w_k|

    with B = K / 32 blocks and gamma_B = B 2^-24 / (1 - B 2^-24)."""
    xs = np.asarray(x, dtype=np.float64)
    w = np.asarray(emulated, dtype=np.float64)
    m, k = xs.shape
    blocks = k // 32
    d = np.abs(xs.reshape(m, blocks, 32)).max(axis=2) / 127.0
    slack = np.repeat(d * (0.5 + 127 * 2.0**-11 + 2.0**-20), 32, axis=1)  # per element, (M, K)
    gamma = blocks * 2.0**-24 / (1 - blocks * 2.0**-24)
    y = xs @ w.T
    bound = slack @ np.abs(w).T + gamma * ((np.abs(xs) + slack) @ np.abs(w).T)
    return y, bound


def stored_bytes(kind: str, n: int, k: int) -> int:
    """Bytes of an (N, K) weight in a ggml block type (K a multiple of the block)."""
    values, size = BLOCK_BYTES[kind]
    return n * (k // values) * size


class GgmlMatmul:
    """One y = x W^T through ggml's CPU mul_mat, its tensors held in one ggml context (see the module).

    weight: (N, K) float32 with K a multiple of 32; kind: "Q4_0" or "Q8_0"; m: rows of the activations.
    Call close() (or use it as a context manager) to free the context."""

    def __init__(self, weight: np.ndarray, kind: str, m: int, threads: int = 1) -> None:
        self.ctx: Any = None
        if kind not in BLOCK_BYTES:
            raise ValueError(f"llama.cpp kinds here are {', '.join(BLOCK_BYTES)}, got {kind!r}")
        w = np.ascontiguousarray(weight, dtype=np.float32)
        n, k = w.shape
        if k % BLOCK_BYTES[kind][0]:
            raise ValueError(f"{kind} stores whole blocks of {BLOCK_BYTES[kind][0]}; {k} inputs are not")
        self.lib = ggml()
        self.kind, self.shape, self.m, self.threads = kind, (n, k), m, threads
        size = stored_bytes(kind, n, k) + 4 * m * k + 4 * m * n + 2 * stored_bytes("Q8_0", m, k) + CONTEXT_SLACK
        base = self.lib.base
        self.ctx = base.ggml_init(_Params(size, None, False))
        if not self.ctx:
            raise MemoryError(f"ggml could not allocate a {size / 1e6:.0f} MB context")
        code = GGML_TYPES[kind]
        self.weight = base.ggml_new_tensor_2d(self.ctx, code, k, n)
        self.input = base.ggml_new_tensor_2d(self.ctx, GGML_TYPES["F32"], k, m)
        base.ggml_quantize_chunk(code, w.ctypes.data, base.ggml_get_data(self.weight), 0, n, k, None)
        self.result = base.ggml_mul_mat(self.ctx, self.weight, self.input)
        self.graph = base.ggml_new_graph(self.ctx)
        base.ggml_build_forward_expand(self.graph, self.result)
        self.converted = base.ggml_new_tensor_2d(self.ctx, GGML_TYPES["Q8_0"], k, m)
        self.conversion = base.ggml_new_graph(self.ctx)
        base.ggml_build_forward_expand(self.conversion, base.ggml_cpy(self.ctx, self.input, self.converted))

    @property
    def weight_bytes(self) -> int:
        return int(self.lib.base.ggml_nbytes(self.weight))

    def weight_blocks(self) -> bytes:
        """The weight's stored blocks, as ggml holds them (row-major, K/32 blocks per row)."""
        return ctypes.string_at(self.lib.base.ggml_get_data(self.weight), self.weight_bytes)

    def set_input(self, x: np.ndarray) -> None:
        xs = np.ascontiguousarray(x, dtype=np.float32)
        if xs.shape != (self.m, self.shape[1]):
            raise ValueError(f"expected activations of shape {(self.m, self.shape[1])}, got {xs.shape}")
        ctypes.memmove(self.lib.base.ggml_get_data(self.input), xs.ctypes.data, xs.nbytes)

    def _compute(self, graph: Any) -> None:
        status = self.lib.cpu.ggml_graph_compute_with_ctx(self.ctx, graph, self.threads)
        if status != 0:
            raise RuntimeError(f"ggml_graph_compute_with_ctx returned status {status}")

    def run(self) -> None:
        """y = x W^T (the activations converted to Q8_0 inside, as llama.cpp does)."""
        self._compute(self.graph)

    def quantize_activations(self) -> None:
        """Only the conversion of the activations to Q8_0 blocks."""
        self._compute(self.conversion)

    def output(self) -> np.ndarray:
        n = self.shape[0]
        pointer = ctypes.cast(self.lib.base.ggml_get_data(self.result), ctypes.POINTER(ctypes.c_float))
        return np.ctypeslib.as_array(pointer, shape=(self.m, n)).copy()

    def close(self) -> None:
        if self.ctx:
            self.lib.base.ggml_free(self.ctx)
            self.ctx = None

    def __enter__(self) -> GgmlMatmul:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()
