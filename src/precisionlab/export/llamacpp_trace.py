"""Read llama.cpp's intermediate tensors while it evaluates a GGUF file, and check its quantized matmuls one by one.

    tensors = capture_tensors(gguf_path, tokens)      name -> [arrays], every F32 / F16 node of the graph
    rows = matmul_check(gguf_path, tensors)             per quantized matmul: llama.cpp's own output against
                                                        the emulation fed llama.cpp's own input
    write_float_gguf(loaded, path)                      the model as an all-F32 GGUF (no quantized tensor)

`capture_tensors` installs llama.cpp's graph evaluation callback (llama_context_params.cb_eval, a
ggml_backend_sched_eval_callback: asked once per node, then called with the node computed) through
llama-cpp-python's ctypes bindings and copies each F32 / F16 node out of host memory, under the graph's names
("attn_norm-0", "Qcur-0", "kq_soft_max-0", "ffn_out-0", "result_output"; a name used twice, as Qcur before
and after RoPE, keeps every copy in graph order). The context is llama-cpp-python's `Llama` with the settings
export.llamacpp uses (one batch, KV cache F32, flash attention off).

`matmul_check` is the teacher-forced test of `+act=llamacpp`: each Linear of a Llama-architecture graph gets
llama.cpp's own input tensor (attn_norm -> Qcur / Kcur / Vcur, kqv_out -> attn_out, ffn_norm -> ffn_gate /
ffn_up, ffn_swiglu -> ffn_out, result_norm -> result_output), quantized as quant.ggml_act does for the weight's
type, times the file's dequantized weight (rows in the file's order, so Q / K need no un-permuting), in
float64; the difference from llama.cpp's output is float rounding when the emulation of that op is exact.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from precisionlab import peers

GGML_DTYPES: dict[int, Any] = {0: np.float32, 1: np.float16}
"""ggml_type enum -> numpy dtype, for the node types read back (F32, F16)."""
GGML_OBJECT_SIZE = 32
"""sizeof(struct ggml_object) (ggml.c): ggml_tensor_overhead() minus it is sizeof(struct ggml_tensor)."""


class GgmlTensor(ctypes.Structure):
    """struct ggml_tensor of ggml.h (GGML_MAX_DIMS 4, GGML_MAX_OP_PARAMS 64, GGML_MAX_SRC 10, GGML_MAX_NAME 64)."""

    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4),
                ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16),
                ("flags", ctypes.c_int32), ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p),
                ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64),
                ("extra", ctypes.c_void_p), ("padding", ctypes.c_char * 8)]


LINEARS = (("attn_norm", "Qcur", "attn_q"), ("attn_norm", "Kcur", "attn_k"), ("attn_norm", "Vcur", "attn_v"),
           ("kqv_out", "attn_out", "attn_output"), ("ffn_norm", "ffn_gate", "ffn_gate"),
           ("ffn_norm", "ffn_up", "ffn_up"), ("ffn_swiglu", "ffn_out", "ffn_down"))
"""(input node, output node, GGUF weight) of each Linear in a Llama block (llama.cpp's graph names)."""


def _check_layout(llama_cpp: Any) -> None:
    lib = llama_cpp.llama_cpp._lib
    overhead = getattr(lib, "ggml_tensor_overhead", None)
    if overhead is None:
        return
    overhead.restype = ctypes.c_size_t
    if int(overhead()) - GGML_OBJECT_SIZE != ctypes.sizeof(GgmlTensor):
        raise RuntimeError("this llama.cpp's struct ggml_tensor is not the layout GgmlTensor reads")


def _read(tensor: GgmlTensor) -> np.ndarray:
    dtype = GGML_DTYPES[tensor.type]
    ne, nb = list(tensor.ne), list(tensor.nb)
    size = sum((n - 1) * s for n, s in zip(ne, nb, strict=True)) + np.dtype(dtype).itemsize
    buffer = (ctypes.c_char * size).from_address(tensor.data)
    view = np.ndarray(shape=tuple(reversed(ne)), dtype=dtype, buffer=buffer, strides=tuple(reversed(nb)))
    return view.astype(np.float32)


@contextlib.contextmanager
def _callback(store: dict[str, list[np.ndarray]], want: Callable[[str], bool]) -> Iterator[None]:
    """While open, every llama.cpp context created gets an eval callback that fills `store`."""
    llama_cpp = peers.llama_cpp()
    _check_layout(llama_cpp)
    import llama_cpp.llama as high_level

    def callback(pointer: int, ask: bool, _user: Any) -> bool:
        tensor = ctypes.cast(pointer, ctypes.POINTER(GgmlTensor)).contents
        name = tensor.name.decode(errors="replace")
        if ask:
            return tensor.type in GGML_DTYPES and want(name)
        if tensor.data:
            store.setdefault(name, []).append(_read(tensor))
        return True

    function = llama_cpp.ggml_backend_sched_eval_callback(callback)
    original = high_level.llama_cpp.llama_context_default_params

    def params() -> Any:
        p = original()
        p.cb_eval = function
        p.cb_eval_user_data = None
        return p

    high_level.llama_cpp.llama_context_default_params = params
    try:
        yield
    finally:
        high_level.llama_cpp.llama_context_default_params = original


def capture_tensors(path: str | Path, tokens: list[int], threads: int = 1,
                    want: Callable[[str], bool] | None = None) -> dict[str, list[np.ndarray]]:
    """llama.cpp's named graph tensors for one batch of `tokens` (module docstring); `want(name)` filters."""
    from precisionlab.export.llamacpp import KV_TYPES

    llama_cpp = peers.llama_cpp()
    store: dict[str, list[np.ndarray]] = {}
    n_ctx = len(tokens) + 8
    with _callback(store, want or (lambda _name: True)):
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, logits_all=True,
                              n_threads=threads, n_threads_batch=threads, type_k=KV_TYPES["f32"],
                              type_v=KV_TYPES["f32"], flash_attn=False, verbose=False)
    try:
        store.clear()  # nothing from loading: only the evaluation of `tokens`
        llm.reset()
        llm.eval(tokens)
    finally:
        llm.close()
    return store


def _weights(path: str | Path) -> dict[str, tuple[str, np.ndarray]]:
    import gguf

    out = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        if len(t.shape) == 2:
            out[t.name] = (t.tensor_type.name, gguf.dequantize(t.data, t.tensor_type).astype(np.float64))
    return out


def _emulated(x: np.ndarray, kind: str, weight: np.ndarray) -> np.ndarray:
    from precisionlab.quant import ggml_act
    from precisionlab.quant.ggml_types import VEC_DOT_TYPE

    vec = VEC_DOT_TYPE[kind]
    values = x if vec == "F32" else ggml_act.activations(x, vec)
    return np.asarray(values, dtype=np.float64) @ weight.T


def matmul_check(path: str | Path, tensors: dict[str, list[np.ndarray]], n_layers: int) -> list[list[Any]]:
    """Per Linear: [layer, weight, type, max |d| / max |llama.cpp|, exact-ish?] (module docstring). Q4_1 / Q5_1
    weights are left out (their min term is not in the file's dequantized values' dot product)."""
    weights = _weights(path)
    head = "output.weight" if "output.weight" in weights else "token_embd.weight"
    jobs = [(str(i), f"{src}-{i}", f"{dst}-{i}", f"blk.{i}.{w}.weight")
            for i in range(n_layers) for src, dst, w in LINEARS]
    jobs.append(("head", "result_norm", "result_output", head))
    rows: list[list[Any]] = []
    for layer, src, dst, weight_name in jobs:
        if src not in tensors or dst not in tensors or weight_name not in weights:
            continue
        kind, weight = weights[weight_name]
        if kind in ("Q4_1", "Q5_1"):
            continue
        x = tensors[src][-1].reshape(-1, weight.shape[1])
        theirs = tensors[dst][0].reshape(-1, weight.shape[0]).astype(np.float64)
        mine = _emulated(x, kind, weight)
        rel = float(np.abs(mine - theirs).max() / max(float(np.abs(theirs).max()), 1e-30))
        rows.append([layer, weight_name, kind, rel])
    return rows


def write_float_gguf(loaded: Any, path: str | Path, tokenizer_pre: str | None = None) -> Path:
    """The loaded model as a GGUF file with every tensor F32 (its values exactly; nothing quantized)."""
    from precisionlab.export import gguf as gguf_export
    from precisionlab.export.plan import Prepared
    from precisionlab.export.results import Recipe
    from precisionlab.interop.writers.gguf_file import write_gguf

    prepared = Prepared(loaded, Recipe("scheme", "f32", scheme=None), None, {})
    plan = gguf_export.plan_gguf(prepared, "f32", tokenizer_pre)
    return write_gguf(path, plan.arch.gguf, plan.pairs, plan.tensors)
