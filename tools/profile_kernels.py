#!/usr/bin/env python3
"""Measure the compute kernels a fleetsim experiment emits and write a kernel table.

fleetsim times every kernel of its workload IR with a model; a *measured kernel table* (CSV,
the role of SimAI-CP's operation database) overrides the model row by row. This tool measures
exactly the kernels the IR emits, on a real GPU with PyTorch, and writes that table:

    python3 tools/profile_kernels.py EXPERIMENT.toml --out TABLE.csv
        [--fleetsim PATH] [--template TEMPLATE.csv] [--gpu NAME]
        [--warmup 10] [--iters 50] [--device cuda] [--clock steady|burst]
        [--attention megatron|cudnn|flash|default] [--plan]

Without ``--template`` it runs ``fleetsim workload EXPERIMENT.toml --export kernels --output
TMP`` to get the template (one row per distinct kernel, ``time_us`` = the model's prediction).
``--plan`` validates the template and prints, one line per kernel to measure, the torch
operation and tensor shapes it would run; it never imports torch. Only the measurement imports
torch, so everything else (and the tests) runs on a CPU-only machine with the standard library.

Kernel table format
-------------------
UTF-8, standard CSV (quoted fields may hold commas). Lines starting with ``#`` and blank
lines are ignored; the first other line is the header ``gpu,dtype,kernel,pass,shape,flops,bytes,time_us,source``.
``shape`` is one of

    gemm:m=M;n=N;k=K;batch=B
    attention:batch=B;heads=H;kv_heads=KV;seq_q=SQ;seq_kv=SKV;head_dim=D;causal=BOOL;flash=BOOL
    elementwise:elements=N

(keys in any order on input, written in this order). Rows of kernel ``imported`` (fixed times
from an imported SimAI workload) may carry any shape text; they are never profiled. Duplicate
keys (gpu, dtype, kernel, pass, shape) are an error. Bad input gives one line
``error: FILE:LINE: what is wrong (expected ...)`` on stderr and exit status 1.

The template may hold rows for several GPUs; rows equal in (dtype, kernel, pass, shape) are
measured once and written once, under the measured GPU's name, with the template's flops and
bytes.

What runs for each shape
------------------------
Tensors are random, in the row's dtype: bf16 / fp16 as themselves, fp32 as float32 with TF32
off, tf32 as float32 with TF32 matmuls on. fp8 GEMMs use ``torch._scaled_mm`` (E4M3 operands,
unit scales, bf16 output; the E4M3/E5M2 choice does not change GEMM speed) with every dimension
padded up to a multiple of 16 as cuBLASLt requires, B > 1 as B calls; where ``_scaled_mm`` is
missing or fails the row is skipped with a note. ``--fp8-fast-accum`` sets cuBLASLt's FP8 fast
accumulation (``use_fast_accum``): ``off`` (the default, cuBLASLt's, and what the committed fp8
tables measured: partial sums promoted to fp32 as the main loop goes), ``on`` for every pass, or
``fprop`` for forward GEMMs only, as Transformer Engine runs FP8 on Hopper
(``_2X_ACC_FPROP = False``, ``_2X_ACC_DGRAD = _2X_ACC_WGRAD = True`` in
``transformer_engine/pytorch/module/base.py``); the table's ``source`` names the mode. fp8
attention and elementwise rows run in bf16 because fleetsim keeps activations in bf16 under
fp8.

GEMM, B independent (M x K)(K x N) products (B > 1 uses ``torch.bmm``):
  * fwd:   ``x[M,K] @ w[N,K].t()``, i.e. ``F.linear`` (Megatron's forward Linear).
  * dgrad: ``dy[M,K] @ w[K,N]``, a plain NN product (input gradient).
  * wgrad: ``a[K,M].t() @ b[K,N]``, a TN product reducing over K = tokens (weight gradient).
  Megatron's fused fp32 gradient accumulation (``main_grad``) is not reproduced: wgrad writes
  the row's dtype.

Attention:
  * flash=true: ``F.scaled_dot_product_attention`` on q [B,H,SQ,D], k/v [B,KV,SKV,D]
    (``enable_gqa=True`` when H != KV), restricted to one SDPA backend chosen by
    ``--attention``: ``megatron`` (the default) is what Megatron-Core with Transformer Engine
    runs, cuDNN fused attention on Hopper and newer (TE's ``get_attention_backend`` disables
    FlashAttention on sm90+ when FusedAttention is available) and FlashAttention elsewhere;
    ``cudnn``, ``flash`` and ``default`` force one. Where the backend refuses a grouped-query
    shape it runs again with k/v materialised per query head before timing (same FLOPs), then
    on the default backend; the table's ``source`` ends with ``attention=BACKEND`` naming what
    ran. Causal with SQ < SKV is context parallelism with all-gathered KV: like Transformer
    Engine's load-balanced split, the queries run as two calls, the first half causally over
    the first SQ/2 keys, the second half over all SKV keys with a bottom-right aligned causal
    mask (torch's ``is_causal`` aligns top-left, which would skip most of the work); cuDNN
    through SDPA has no such mask, so there the second call is a full rectangle over the first
    SKV - SQ/2 keys plus a causal square over the last SQ/2, as TE's CP ring issues its blocks.
  * flash=false: Megatron's unfused core attention: k/v repeated to H heads (GQA),
    ``baddbmm(Q, K^T, alpha=1/sqrt(D))``, in-place mask fill, softmax, dropout(p=0.1),
    ``bmm`` with V. Eager torch runs the mask fill and the softmax as two kernels where
    Megatron fuses them, so this slightly overstates the cost.
  * fwd times the forward; bwd runs the forward once with ``requires_grad`` and times only
    ``torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)``.

Elementwise (memory-bound; sized from the row's ``bytes`` and the activation element size,
4 bytes for fp32/tf32 and 2 otherwise). fleetsim counts a backward as twice its forward's
traffic, so the tensor size N below recovers the forward's tensor for every pass (``--plan``
prints each N):
  * norms (input_norm, pre_mlp_norm, final_norm): ``F.layer_norm`` with weight and bias over
    rows of width 4096, N = bytes / (2 x elem) rounded to whole rows (fwd reads x and writes
    y; backward N = bytes / (4 x elem)). LayerNorm and a fused RMSNorm move the same bytes, so
    layer_norm stands for both; eager RMSNorm would run several kernels.
  * activations (mlp_activation, expert_activation, shared_expert_activation): ``F.gelu`` on N
    = bytes / (2 x elem) elements (backward bytes / (4 x elem)). For GELU that is the real
    tensor; for SwiGLU (read 2f, write f) it is a single kernel moving the same bytes as
    Megatron's fused SwiGLU, which eager ``silu(a) * b`` (two kernels) would not.
  * residuals (attn_bias_dropout_add, mlp_bias_dropout_add): ``F.dropout(x, 0.1) + r`` with
    N = bytes / (3 x elem) (read x and r, write the sum; backward bytes / (6 x elem)). Eager
    torch runs dropout and add as two kernels where Megatron's jit fuses them, so this
    somewhat overstates the cost.
  * everything else (embedding, rope, router, moe_permute, moe_unpermute, cross_entropy,
    grad_norm, optimizer_step, param_copy, grad_zero, fp8_cast, and any other kernel with an
    elementwise shape): a bandwidth proxy ``torch.add(a, b, out=c)`` whose total traffic equals ``bytes`` (N = bytes /
    (3 x elem) each, run as calls of at most 2^28 elements to bound memory), for every pass.
    These kernels are gathers, scatters, reductions or chains of pointwise ops bounded by HBM
    bandwidth, so moving the same bytes at the copy-kernel rate is the closest stand-in.
  The backward passes (``bwd``, and ``dgrad``/``wgrad`` on an elementwise shape, such as the
  embedding's scatter-add) time the autograd backward of the ops above that have one (inputs
  with ``requires_grad``: x, weight and bias for norms; x for gelu; x and r for residuals).

Timing: CUDA events around each call; ``--warmup`` untimed calls, then ``--iters`` timed
calls, the median in microseconds. ``--clock steady`` (the default: what a training loop sees,
and so what a table for fleetsim's simulations should hold): two 8192³ bf16 GEMMs run before
every timed call (they also evict L2 and cover the launch), after 2 s of them before the first
row, so every kernel runs at the power-capped clock of sustained load (on an H100 bf16 GEMMs
take 1.13x their burst time). ``--clock burst`` (the convention of published kernel
benchmarks): before every timed call a 256 MiB buffer is zeroed (more than any L2 to date: 50 MB
on H100, 126 MB on B200) so each call starts with a cold L2; then a short spin kernel
(``torch.cuda._sleep``) keeps the GPU busy while Python launches the timed call, so host launch
overhead is not measured; the GPU is near idle before each call, so compute-bound kernels run
above the clock a training loop holds. ``--device cpu`` times with a wall clock and no flush;
it exists to smoke-test the tool without a GPU, not to measure.

GPU names: ``--gpu`` names the GPU in the output; by default ``torch.cuda.get_device_name()``
maps to fleetsim's canonical name (see ``GPU_PATTERNS``); an unknown name is an error that asks
for ``--gpu``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import datetime
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Callable, Iterable
from typing import NamedTuple

HEADER = ("gpu", "dtype", "kernel", "pass", "shape", "flops", "bytes", "time_us", "source")

DTYPES = ("bf16", "fp16", "fp8", "fp32", "tf32")
PASSES = ("fwd", "dgrad", "wgrad", "bwd")
IMPORTED = "imported"
NORMS = ("input_norm", "pre_mlp_norm", "final_norm")
ACTIVATIONS = ("mlp_activation", "expert_activation", "shared_expert_activation")
RESIDUALS = ("attn_bias_dropout_add", "mlp_bias_dropout_add")
KERNELS = (
    "embedding", "input_norm", "qkv_proj", "mla_q_down_proj", "mla_kv_down_proj",
    "mla_q_up_proj", "mla_kv_up_proj", "rope", "core_attention", "out_proj",
    "attn_bias_dropout_add", "pre_mlp_norm", "mlp_up", "mlp_activation", "mlp_down",
    "mlp_bias_dropout_add", "router", "router_topk", "moe_permute", "moe_unpermute", "expert_up",
    "expert_activation", "expert_down", "shared_expert_up", "shared_expert_activation",
    "shared_expert_down", "final_norm", "logits", "cross_entropy", "grad_norm",
    "optimizer_step", "param_copy", "grad_zero", "fp8_cast", IMPORTED,
)

NORM_WIDTH = 4096
DROPOUT_P = 0.1
FLUSH_BYTES = 256 * 1024 * 1024
# About 1 ms at 2 GHz: long enough for Python to launch even an autograd backward.
SPIN_CYCLES = 2_000_000
FP8_ALIGN = 16
# Largest tensor of the bandwidth proxy; bigger rows loop over it (same bytes, bounded memory:
# an optimizer step over a billion parameters would otherwise need tens of GB).
PROXY_CHUNK = 1 << 28
# `--clock steady`: square bf16 GEMMs of this size run before every timed call (and for
# HEAT_SECONDS before the first), so the GPU sits at the clock its power limit allows under a
# training loop's load instead of boosting after an idle gap.
HEATER_DIM = 8192
HEATER_CALLS = 2
HEAT_SECONDS = 2.0
CLOCKS = ("burst", "steady")
# `--attention megatron` times the backend Megatron-Core with Transformer Engine runs: cuDNN
# fused attention on Hopper and newer (TE's FusedAttention), FlashAttention elsewhere.
ATTENTION_BACKENDS = ("megatron", "cudnn", "flash", "default")

# device-name pattern (upper-cased) -> fleetsim GPU name; None: known part without a fleetsim
# configuration. First match wins, so variants come before their family.
GPU_PATTERNS: tuple[tuple[str, str | None], ...] = (
    (r"GB200", "GB200"),
    (r"\bB200\b", "B200"),
    (r"GH200", None),
    (r"H200.*NVL", None),
    (r"H200", "H200-SXM"),
    (r"H100.*PCIE", "H100-PCIe"),
    (r"H100.*NVL", None),
    (r"H100", "H100-SXM"),
    (r"H800.*PCIE", None),
    (r"H800", "H800"),
    (r"\bH20\b", "H20"),
    (r"A100.*PCIE", None),
    (r"A100.*40GB", "A100-SXM-40GB"),
    (r"A100", "A100-SXM-80GB"),
    (r"A800.*PCIE", None),
    (r"A800", "A800"),
    (r"V100.*PCIE", None),
    (r"V100", "V100"),
    (r"MI300X", "MI300X"),
)
KNOWN_GPUS = (
    "H100-SXM", "H100-PCIe", "H200-SXM", "H800", "H20", "A100-SXM-80GB", "A100-SXM-40GB",
    "A800", "B200", "GB200", "V100", "MI300X",
)


class InputError(Exception):
    """Bad user input: reported as one `error:` line, never a traceback."""


class RowError(ValueError):
    """A bad field of a row; the reader adds file and line."""


# ----- shapes -----


@dataclasses.dataclass(frozen=True)
class Gemm:
    m: int
    n: int
    k: int
    batch: int


@dataclasses.dataclass(frozen=True)
class Attention:
    batch: int
    heads: int
    kv_heads: int
    seq_q: int
    seq_kv: int
    head_dim: int
    causal: bool
    flash: bool
    # Dropout on the probabilities (fleetsim writes `;dropout=true` only when set): timed
    # with dropout_p 0.1, Megatron-LM's default.
    dropout: bool = False


@dataclasses.dataclass(frozen=True)
class Elementwise:
    elements: int
    # A chain of small ops (fleetsim writes `;kernels=K` only above 1): an unfused MoE router
    # or permutation, timed as K launches sharing the traffic.
    kernels: int = 1


Shape = Gemm | Attention | Elementwise

# kind -> (class, keys in canonical order); the field names are the keys.
SHAPE_KINDS: dict[str, tuple[type, tuple[str, ...]]] = {
    "gemm": (Gemm, ("m", "n", "k", "batch")),
    "attention": (
        Attention,
        ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim", "causal", "flash", "dropout"),
    ),
    "elementwise": (Elementwise, ("elements", "kernels")),
}
BOOL_KEYS = ("causal", "flash", "dropout")
# Keys that may be left out, with the value they then take.
OPTIONAL_KEYS = {"dropout": False, "kernels": 1}


def shape_syntax(kind: str) -> str:
    keys = SHAPE_KINDS[kind][1]
    return f"{kind}:" + ";".join(
        f"{k}={'true|false' if k in BOOL_KEYS else k.upper()}" for k in keys
    )


def parse_shape(text: str) -> Shape:
    """Parses a shape; raises RowError naming what is wrong."""
    kind, sep, rest = text.partition(":")
    if not sep or kind not in SHAPE_KINDS:
        expected = " or ".join(f"{k}:..." for k in SHAPE_KINDS)
        raise RowError(f"unknown shape kind in '{text}' (expected {expected})")
    cls, keys = SHAPE_KINDS[kind]
    expected = f"expected {shape_syntax(kind)}"
    values: dict[str, object] = {}
    for item in rest.split(";"):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or key not in keys:
            raise RowError(f"malformed shape '{text}': bad field '{item}' ({expected})")
        if key in values:
            raise RowError(f"malformed shape '{text}': '{key}' given twice ({expected})")
        if key in BOOL_KEYS:
            if value not in ("true", "false"):
                raise RowError(f"malformed shape '{text}': {key}={value} ({expected})")
            values[key] = value == "true"
        else:
            # Zero-sized kernels do not exist; a zero here is a broken export.
            if not value.isdigit() or not value.isascii() or int(value) == 0:
                raise RowError(
                    f"malformed shape '{text}': {key}={value} is not a positive integer "
                    f"({expected})"
                )
            values[key] = int(value)
    missing = [k for k in keys if k not in values and k not in OPTIONAL_KEYS]
    if missing:
        raise RowError(f"malformed shape '{text}': missing {', '.join(missing)} ({expected})")
    shape = cls(**values)
    if isinstance(shape, Attention) and shape.heads % shape.kv_heads:
        raise RowError(
            f"malformed shape '{text}': heads={shape.heads} is not a multiple of "
            f"kv_heads={shape.kv_heads} (expected grouped-query attention)"
        )
    return shape


def shape_text(shape: Shape) -> str:
    """The canonical text of a shape (keys in the documented order)."""
    kind = {Gemm: "gemm", Attention: "attention", Elementwise: "elementwise"}[type(shape)]
    parts = []
    for key in SHAPE_KINDS[kind][1]:
        value = getattr(shape, key)
        if key in OPTIONAL_KEYS and value == OPTIONAL_KEYS[key]:
            continue
        parts.append(f"{key}={str(value).lower() if isinstance(value, bool) else value}")
    return f"{kind}:" + ";".join(parts)


# ----- the table -----


@dataclasses.dataclass(frozen=True)
class Row:
    gpu: str
    dtype: str
    kernel: str
    pass_: str
    # Parsed for profiled kernels; the raw text for `imported` rows.
    shape: Shape | str
    flops: int
    bytes: int
    time_us: float
    source: str
    line: int = 0

    @property
    def shape_str(self) -> str:
        return self.shape if isinstance(self.shape, str) else shape_text(self.shape)

    def key(self) -> tuple[str, str, str, str, str]:
        return (self.gpu, self.dtype, self.kernel, self.pass_, self.shape_str)

    def measure_key(self) -> tuple[str, str, str, str]:
        """What the measurement depends on: the GPU is the one the tool runs on."""
        return (self.dtype, self.kernel, self.pass_, self.shape_str)


def one_of(what: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise RowError(f"unknown {what} '{value}' (expected one of: {' '.join(allowed)})")


FLOAT_RE = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def parse_row(fields: list[str], line: int) -> Row:
    gpu, dtype, kernel, pass_, shape, flops, nbytes, time_us, source = fields
    if not gpu:
        raise RowError("empty gpu (expected a fleetsim GPU name such as H100-SXM)")
    one_of("dtype", dtype, DTYPES)
    one_of("kernel", kernel, KERNELS)
    one_of("pass", pass_, PASSES)
    if kernel == IMPORTED:
        if not shape:
            raise RowError("empty shape (expected the imported kernel's shape text)")
        parsed: Shape | str = shape
    else:
        parsed = parse_shape(shape)
        allowed = {Gemm: ("fwd", "dgrad", "wgrad"), Attention: ("fwd", "bwd")}.get(type(parsed))
        if allowed and pass_ not in allowed:
            raise RowError(
                f"pass {pass_} does not apply to a {shape.partition(':')[0]} shape "
                f"(expected one of: {' '.join(allowed)})"
            )
    counts = []
    for name, value in (("flops", flops), ("bytes", nbytes)):
        if not (value.isascii() and value.isdigit()):
            raise RowError(f"{name} '{value}' is not a non-negative integer (expected e.g. 1024)")
        counts.append(int(value))
    if not FLOAT_RE.fullmatch(time_us):
        raise RowError(f"time_us '{time_us}' is not a number (expected e.g. 12.5)")
    t = float(time_us)
    if not (math.isfinite(t) and t > 0):
        raise RowError(f"time_us {time_us} is not positive (expected a positive finite number "
                       "of microseconds)")
    return Row(gpu, dtype, kernel, pass_, parsed, counts[0], counts[1], t, source, line)


def read_table(path: str | Path) -> list[Row]:
    """Reads and validates a kernel table; raises InputError with FILE:LINE. Standard CSV
    (RFC 4180 quoting, as fleetsim's reader, the `csv` crate, takes it); lines that start with
    ``#`` and blank lines are skipped."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{name}: cannot read the kernel table: {e}") from None
    rows: list[Row] = []
    seen: dict[tuple[str, ...], int] = {}
    header_seen = False
    # Lines end at \n only, as in fleetsim's reader, so line numbers agree.
    lines = text.split("\n")
    reader = csv.reader(
        (line for line in lines if not line.strip().startswith("#")),
        strict=True,
        skipinitialspace=True,
    )
    # csv counts the lines it read, which skips the comments: map back to the file's lines.
    kept = [n for n, line in enumerate(lines, start=1) if not line.strip().startswith("#")]
    while True:
        starts = kept[min(reader.line_num, len(kept) - 1)]
        try:
            record = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            raise InputError(f"{name}:{starts}: {e} (expected standard CSV)") from None
        # The record's first line: its last line less the line breaks inside quoted fields.
        number = kept[reader.line_num - 1 - sum(f.count("\n") for f in record)]
        fields = [f.strip() for f in record]
        if not fields or fields == [""]:
            continue
        where = f"{name}:{number}"
        if not header_seen:
            if tuple(fields) != HEADER:
                raise InputError(
                    f"{where}: bad header '{','.join(fields)}' (expected {','.join(HEADER)})"
                )
            header_seen = True
            continue
        if len(fields) != len(HEADER):
            raise InputError(
                f"{where}: {len(fields)} fields (expected {len(HEADER)}: {','.join(HEADER)})"
            )
        try:
            row = parse_row(fields, number)
        except RowError as e:
            raise InputError(f"{where}: {e}") from None
        first = seen.setdefault(row.key(), number)
        if first != number:
            raise InputError(
                f"{where}: duplicate key {','.join(row.key())} "
                f"(expected each gpu,dtype,kernel,pass,shape once; first at line {first})"
            )
        rows.append(row)
    if not header_seen:
        end = len(text.splitlines()) + 1
        raise InputError(f"{name}:{end}: no header (expected {','.join(HEADER)})")
    return rows


def format_time(t: float) -> str:
    """Fixed point with nanosecond resolution; never rounds a positive time to zero."""
    if not (math.isfinite(t) and t > 0):
        raise ValueError(f"time_us must be positive and finite, got {t}")
    text = f"{t:.3f}"
    return text if float(text) > 0 else repr(t)


def write_table(path: str | Path, rows: Iterable[Row]) -> None:
    """Standard CSV: a field with a comma, quote or line break is quoted."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow(HEADER)
        for r in rows:
            out.writerow((r.gpu, r.dtype, r.kernel, r.pass_, r.shape_str, str(r.flops),
                          str(r.bytes), format_time(r.time_us), r.source))


def distinct(rows: Iterable[Row]) -> tuple[list[Row], list[Row]]:
    """Rows to measure, one per (dtype, kernel, pass, shape) in template order, and the
    skipped `imported` rows."""
    measure: dict[tuple[str, ...], Row] = {}
    imported = []
    for row in rows:
        if row.kernel == IMPORTED:
            imported.append(row)
        else:
            measure.setdefault(row.measure_key(), row)
    return list(measure.values()), imported


# ----- GPU names -----


def canonical_gpu(device_name: str) -> str:
    """fleetsim's name for a torch device name; raises InputError when there is none."""
    upper = device_name.upper()
    for pattern, name in GPU_PATTERNS:
        if re.search(pattern, upper):
            if name is None:
                break
            return name
    raise InputError(
        f"GPU '{device_name}' has no fleetsim GPU name (expected one of: "
        f"{' '.join(KNOWN_GPUS)}); pass --gpu NAME"
    )


# ----- plans: what runs for a row, decided without torch -----


def elem_bytes(dtype: str) -> int:
    """Bytes of an activation element (fleetsim keeps fp8 activations in bf16)."""
    return 4 if dtype in ("fp32", "tf32") else 2


def torch_dtype_name(dtype: str) -> str:
    """The torch dtype of a row's tensors (fp8 GEMM operands aside)."""
    return {"bf16": "bfloat16", "fp16": "float16", "fp8": "bfloat16", "fp32": "float32",
            "tf32": "float32"}[dtype]


def dtype_note(dtype: str) -> str:
    return {"fp32": "float32 TF32 off", "tf32": "float32 TF32 on"}.get(dtype,
                                                                       torch_dtype_name(dtype))


def round_up(value: int, to: int) -> int:
    return -(-value // to) * to


@dataclasses.dataclass(frozen=True)
class GemmPlan:
    pass_: str
    # The sizes that run: the row's, or for fp8 padded up to multiples of 16.
    m: int
    n: int
    k: int
    batch: int
    dtype: str
    fp8: bool = False
    padded: bool = False
    # cuBLASLt's FP8 fast accumulation (``use_fast_accum``); fp8 only.
    fast_accum: bool = False

    def describe(self) -> str:
        m, n, k, b = self.m, self.n, self.k, self.batch
        if self.fp8:
            loop = f"{b} x " if b > 1 else ""
            pad = " (padded to multiples of 16)" if self.padded else ""
            fast = ", use_fast_accum=True" if self.fast_accum else ""
            return (f"{loop}torch._scaled_mm(a[{m},{k}] float8_e4m3fn, b[{k},{n}] column-major "
                    f"float8_e4m3fn, out_dtype=bfloat16{fast}){pad}")
        bp = f"{b}," if b > 1 else ""
        if self.pass_ == "fwd":
            op = (f"torch.bmm(x[{bp}{m},{k}], w[{bp}{n},{k}].transpose(1,2))" if b > 1
                  else f"torch.nn.functional.linear(x[{m},{k}], w[{n},{k}])")
        elif self.pass_ == "dgrad":
            op = f"torch.{'bmm' if b > 1 else 'mm'}(dy[{bp}{m},{k}], w[{bp}{k},{n}])"
        else:
            t = ".transpose(1,2)" if b > 1 else ".t()"
            op = f"torch.{'bmm' if b > 1 else 'mm'}(a[{bp}{k},{m}]{t}, b[{bp}{k},{n}])"
        return f"{op} {dtype_note(self.dtype)}"


FP8_FAST_ACCUM = ("off", "on", "fprop")


def plan_gemm(row: Row, fp8_fast_accum: str = "off") -> GemmPlan:
    s = row.shape
    assert isinstance(s, Gemm)
    if row.dtype != "fp8":
        return GemmPlan(row.pass_, s.m, s.n, s.k, s.batch, row.dtype)
    m, n, k = (round_up(v, FP8_ALIGN) for v in (s.m, s.n, s.k))
    fast = fp8_fast_accum == "on" or (fp8_fast_accum == "fprop" and row.pass_ == "fwd")
    return GemmPlan(row.pass_, m, n, k, s.batch, row.dtype, True, (m, n, k) != (s.m, s.n, s.k),
                    fast)


class Chunk(NamedTuple):
    """One attention call: queries [q_start, q_end) over keys [kv_start, kv_start + kv_len)."""
    q_start: int
    q_end: int
    kv_len: int
    # "none", "causal" (top-left, torch's is_causal) or "lower_right".
    mask: str
    kv_start: int = 0


def attention_chunks(s: Attention) -> list[Chunk]:
    if not s.causal:
        return [Chunk(0, s.seq_q, s.seq_kv, "none")]
    if not s.flash:
        # Unfused attention computes the whole score matrix whatever the mask alignment.
        return [Chunk(0, s.seq_q, s.seq_kv, "lower_right")]
    if s.seq_q >= s.seq_kv or s.seq_q < 2:
        return [Chunk(0, s.seq_q, s.seq_kv, "causal")]
    # CP with gathered KV (load-balanced): this rank's early chunk sees the keys up to it, its
    # late chunk all keys; rank 0's split gives every rank's amount of work.
    half = s.seq_q // 2
    return [Chunk(0, half, half, "causal"), Chunk(half, s.seq_q, s.seq_kv, "lower_right")]


def without_lower_right(chunks: list[Chunk]) -> list[Chunk]:
    """The same work for a backend without bottom-right causal masks (cuDNN through SDPA): a
    chunk of q queries over k > q keys is the full rectangle over the first k - q keys plus a
    causal square over the last q, as Transformer Engine's CP ring issues its blocks."""
    out = []
    for c in chunks:
        q_len = c.q_end - c.q_start
        if c.mask != "lower_right" or q_len >= c.kv_len:
            out.append(c if c.mask != "lower_right" else c._replace(mask="causal"))
            continue
        out.append(Chunk(c.q_start, c.q_end, c.kv_len - q_len, "none", c.kv_start))
        out.append(Chunk(c.q_start, c.q_end, q_len, "causal", c.kv_start + c.kv_len - q_len))
    return out


@dataclasses.dataclass(frozen=True)
class AttentionPlan:
    shape: Attention
    backward: bool
    dtype: str
    # The SDPA backend of fused rows: "cudnn", "flash" or "default".
    backend: str = "flash"

    @property
    def chunks(self) -> list[Chunk]:
        chunks = attention_chunks(self.shape)
        if self.shape.flash and self.backend != "flash":
            return without_lower_right(chunks)
        return chunks

    def describe(self) -> str:
        s = self.shape
        dt = dtype_note(self.dtype)
        b, h, kv, sq, skv, d = s.batch, s.heads, s.kv_heads, s.seq_q, s.seq_kv, s.head_dim
        if s.flash:
            gqa = ", enable_gqa=True" if h != kv else ""
            calls = []
            for c in self.chunks:
                q = f"q[{b},{h},{c.q_end - c.q_start},{d}]"
                k = f"k/v[{b},{kv},{c.kv_len},{d}]"
                mask = {"none": "", "causal": ", is_causal=True",
                        "lower_right": ", attn_mask=causal_lower_right"}[c.mask]
                calls.append(f"scaled_dot_product_attention({q}, {k}{mask}{gqa})")
            op = " + ".join(calls) + f" {dt} {self.backend} backend"
        else:
            rep = f"repeat_interleave k/v[{b},{kv},{skv},{d}] to {h} heads, " if h != kv else ""
            mask = "masked_fill_(causal), " if s.causal else ""
            op = (f"unfused: {rep}baddbmm(q[{b * h},{sq},{d}], k[{b * h},{d},{skv}]), {mask}"
                  f"softmax, dropout(p={DROPOUT_P}), bmm(p[{b * h},{sq},{skv}], "
                  f"v[{b * h},{skv},{d}]) {dt}")
        if self.backward:
            return f"backward of {op}: torch.autograd.grad(out, (q, k, v), dout)"
        return op


@dataclasses.dataclass(frozen=True)
class ElementwisePlan:
    # "layer_norm", "gelu", "dropout_add" or "add".
    op: str
    backward: bool
    dtype: str
    # layer_norm: [numel // NORM_WIDTH, NORM_WIDTH]; otherwise [numel].
    numel: int
    # "add": the traffic split over this many launches (a chain of small ops).
    launches: int = 1

    def describe(self) -> str:
        dt = dtype_note(self.dtype)
        n = self.numel
        if self.op == "layer_norm":
            op = f"torch.nn.functional.layer_norm(x[{n // NORM_WIDTH},{NORM_WIDTH}], w, b)"
        elif self.op == "gelu":
            op = f"torch.nn.functional.gelu(x[{n}])"
        elif self.op == "dropout_add":
            op = f"torch.nn.functional.dropout(x[{n}], p={DROPOUT_P}) + r[{n}]"
        else:
            calls = []
            for size, count in proxy_calls(max(1, n // self.launches)):
                count *= self.launches
                repeat = f"{count} x " if count > 1 else ""
                calls.append(f"{repeat}torch.add(a[{size}], b[{size}], out=c[{size}])")
            return f"{' + '.join(calls)} {dt} (bandwidth proxy)"
        if self.backward:
            return f"backward of {op} {dt}: torch.autograd.grad"
        return f"{op} {dt}"


def proxy_calls(numel: int) -> list[tuple[int, int]]:
    """(tensor size, calls) of a proxy moving `numel` elements per tensor in chunks."""
    full, rest = divmod(numel, PROXY_CHUNK)
    calls = [(PROXY_CHUNK, full)] if full else []
    return [*calls, (rest, 1)] if rest else calls


def elementwise_op(kernel: str) -> str:
    if kernel in NORMS:
        return "layer_norm"
    if kernel in ACTIVATIONS:
        return "gelu"
    if kernel in RESIDUALS:
        return "dropout_add"
    return "add"


# A faithful op's forward traffic in tensors of N elements, as fleetsim counts it (read x, write
# y; dropout_add also reads r). fleetsim counts a backward as twice its forward.
FORWARD_TENSORS = {"layer_norm": 2, "gelu": 2, "dropout_add": 3}


def plan_elementwise(row: Row) -> ElementwisePlan:
    op = elementwise_op(row.kernel)
    e = elem_bytes(row.dtype)
    if op == "add":
        # a + b -> c moves exactly the row's bytes, whatever the pass, in as many launches as
        # the row's chain of small ops has.
        launches = row.shape.kernels if isinstance(row.shape, Elementwise) else 1
        numel = max(1, round(row.bytes / (3 * e)))
        return ElementwisePlan("add", False, row.dtype, numel, launches)
    backward = row.pass_ != "fwd"
    numel = row.bytes / (FORWARD_TENSORS[op] * (2 if backward else 1) * e)
    if op == "layer_norm":
        numel = max(1, round(numel / NORM_WIDTH)) * NORM_WIDTH
    return ElementwisePlan(op, backward, row.dtype, max(1, round(numel)))


Plan = GemmPlan | AttentionPlan | ElementwisePlan


def plan_row(row: Row, backend: str = "flash", fp8_fast_accum: str = "off") -> Plan:
    if isinstance(row.shape, Gemm):
        return plan_gemm(row, fp8_fast_accum)
    if isinstance(row.shape, Attention):
        return AttentionPlan(row.shape, row.pass_ == "bwd", row.dtype, backend)
    return plan_elementwise(row)


def plan_line(row: Row, backend: str = "flash", fp8_fast_accum: str = "off") -> str:
    return (f"{row.dtype} {row.kernel} {row.pass_} {row.shape_str}: "
            f"{plan_row(row, backend, fp8_fast_accum).describe()}")


def megatron_attention_backend(capability: tuple[int, int] | None) -> str:
    """The fused-attention backend Megatron-Core with Transformer Engine runs on a GPU of this
    compute capability (None: not an NVIDIA GPU): TE prefers FusedAttention (cuDNN) over
    FlashAttention on sm90 and newer (TE `dot_product_attention/utils.py`,
    `get_attention_backend`), FlashAttention elsewhere."""
    if capability is not None and capability >= (9, 0):
        return "cudnn"
    return "flash"


# ----- the template from fleetsim -----


def find_fleetsim(explicit: str | None) -> str:
    if explicit:
        return explicit
    for candidate in (Path("target/release/fleetsim"),
                      Path(__file__).resolve().parent.parent / "target/release/fleetsim"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("fleetsim")
    if found:
        return found
    raise InputError(
        "no fleetsim binary (expected target/release/fleetsim or fleetsim on PATH); "
        "pass --fleetsim PATH or --template FILE"
    )


def export_template(fleetsim: str, experiment: str, out: Path) -> None:
    cmd = [fleetsim, "workload", experiment, "--export", "kernels", "--output", str(out)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as e:
        raise InputError(f"cannot run {fleetsim}: {e}") from None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        # fleetsim's own one-line error, or clap's first line (its last is a --help hint).
        errors = [line for line in lines if line.startswith("error:")]
        detail = (errors or lines or [f"exit status {done.returncode}"])[0]
        raise InputError(f"{' '.join(cmd)} failed: {detail.removeprefix('error: ')}")


# ----- measurement (the only part that imports torch) -----


class Skip(Exception):
    """A row this torch / GPU cannot measure; noted on stderr, left out of the table."""


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def note(message: str) -> None:
    print(f"note: {message}", file=sys.stderr)


class Profiler:
    def __init__(self, device: str, warmup: int, iters: int, clock: str = "steady",
                 attention: str = "megatron", fp8_fast_accum: str = "off"):
        try:
            import torch  # lazy: only measuring needs torch
        except (ImportError, OSError) as e:
            raise InputError(
                f"measuring needs PyTorch ({first_line(e)}); --plan does not"
            ) from None
        self.torch = torch
        try:
            self.device = torch.device(device)
        except RuntimeError as e:
            raise InputError(f"--device {device}: {first_line(e)} (expected e.g. cuda)") from None
        self.cuda = self.device.type == "cuda"
        if self.cuda and not torch.cuda.is_available():
            raise InputError(f"--device {device}: torch sees no GPU (expected a CUDA/ROCm GPU)")
        self.warmup, self.iters = warmup, iters
        self.clock = clock
        self.fp8_fast_accum = fp8_fast_accum
        self.flush = None
        self.heater = None
        if self.cuda:
            self.flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device=self.device)
            if clock == "steady":
                a = torch.randn(HEATER_DIM, HEATER_DIM, dtype=torch.bfloat16, device=self.device)
                self.heater = (a, a.clone())
                self.heat(HEAT_SECONDS)
        self.backend = attention
        if attention == "megatron":
            hip = getattr(torch.version, "hip", None)
            capability = (torch.cuda.get_device_capability(self.device)
                          if self.cuda and not hip else None)
            self.backend = megatron_attention_backend(capability)
        self._gqa: bool | None = None
        self._notes: set[str] = set()

    def note_once(self, message: str) -> None:
        if message not in self._notes:
            self._notes.add(message)
            note(message)

    def device_name(self) -> str:
        return self.torch.cuda.get_device_name(self.device) if self.cuda else "cpu"

    def source(self) -> str:
        v = self.torch.version
        runtime = f"hip={v.hip}" if getattr(v, "hip", None) else f"cuda={v.cuda}"
        date = datetime.datetime.now(datetime.UTC).date().isoformat()
        how = ("steady (after a bf16 GEMM heater)" if self.clock == "steady"
               else "burst (cold L2 and an idle spin before each call)")
        fast = ("" if self.fp8_fast_accum == "off"
                else f" fp8 fast accumulation {self.fp8_fast_accum}")
        return clean_text(f"profile_kernels.py torch={self.torch.__version__} {runtime} "
                          f"{self.device_name()} {date} median of {self.iters} {how}{fast}")

    # -- timing --

    def heat(self, seconds: float) -> None:
        """Runs heater GEMMs for `seconds` of wall time (steady clock)."""
        a, b = self.heater
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            for _ in range(8):
                self.torch.mm(a, b)
            self.torch.cuda.synchronize(self.device)

    def before_call(self) -> None:
        """What runs on the GPU right before a timed call: a cold L2 and an idle spin (burst),
        or heater GEMMs, which also evict L2 (steady)."""
        if self.heater is not None:
            a, b = self.heater
            for _ in range(HEATER_CALLS):
                self.torch.mm(a, b)
            return
        self.flush.zero_()
        spin = getattr(self.torch.cuda, "_sleep", None)
        if spin is not None:
            spin(SPIN_CYCLES)

    def time_us(self, fn: Callable[[], object]) -> float:
        torch = self.torch
        for _ in range(self.warmup):
            fn()
        if not self.cuda:
            samples = []
            for _ in range(self.iters):
                start = time.perf_counter()
                fn()
                samples.append((time.perf_counter() - start) * 1e6)
            return statistics.median(samples)
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(self.iters)]
        for start, end in events:
            self.before_call()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(self.device)
        return statistics.median(s.elapsed_time(e) * 1000.0 for s, e in events)

    def measure(self, row: Row) -> tuple[float, str]:
        """The median time of `row` in microseconds, and for attention the backend that ran."""
        torch = self.torch
        plan = plan_row(row, self.backend, self.fp8_fast_accum)
        ran = ""
        # TF32 only where the row asks for it; fp32 means full-precision matmuls.
        torch.backends.cuda.matmul.allow_tf32 = row.dtype == "tf32"
        torch.backends.cudnn.allow_tf32 = row.dtype == "tf32"
        try:
            if isinstance(plan, GemmPlan):
                fn = self.gemm(plan)
            elif isinstance(plan, AttentionPlan):
                fn, ran = self.attention(plan)
            else:
                fn = self.elementwise(plan)
            t = self.time_us(fn)
        except (RuntimeError, NotImplementedError, TypeError, ValueError) as e:
            # OutOfMemoryError is a RuntimeError: a shape too big for this GPU is skipped.
            raise Skip(first_line(e)) from None
        finally:
            fn = None
            if self.cuda:
                torch.cuda.empty_cache()
        if not (math.isfinite(t) and t > 0):
            raise Skip(f"measured a non-positive time {t}")
        return t, ran

    def dtype(self, plan_dtype: str):
        return getattr(self.torch, torch_dtype_name(plan_dtype))

    def randn(self, *shape, dtype, grad=False):
        return self.torch.randn(*shape, dtype=dtype, device=self.device, requires_grad=grad)

    # -- builders: each returns the zero-argument call to time --

    def gemm(self, p: GemmPlan) -> Callable[[], object]:
        torch = self.torch
        if p.fp8:
            return self.fp8_gemm(p)
        dt = self.dtype(p.dtype)
        b, m, n, k = p.batch, p.m, p.n, p.k
        lead = (b,) if b > 1 else ()
        if p.pass_ == "fwd":
            x, w = self.randn(*lead, m, k, dtype=dt), self.randn(*lead, n, k, dtype=dt)
            if b > 1:
                return lambda: torch.bmm(x, w.transpose(1, 2))
            return lambda: torch.nn.functional.linear(x, w)
        if p.pass_ == "dgrad":
            dy, w = self.randn(*lead, m, k, dtype=dt), self.randn(*lead, k, n, dtype=dt)
            return (lambda: torch.bmm(dy, w)) if b > 1 else (lambda: torch.mm(dy, w))
        a, g = self.randn(*lead, k, m, dtype=dt), self.randn(*lead, k, n, dtype=dt)
        if b > 1:
            return lambda: torch.bmm(a.transpose(1, 2), g)
        return lambda: torch.mm(a.t(), g)

    def fp8_gemm(self, p: GemmPlan) -> Callable[[], object]:
        torch = self.torch
        scaled_mm = getattr(torch, "_scaled_mm", None)
        if scaled_mm is None:
            raise Skip("torch._scaled_mm is missing in this torch (fp8 GEMMs need torch >= 2.1)")
        hip = getattr(torch.version, "hip", None)
        if self.cuda and not hip and torch.cuda.get_device_capability(self.device) < (8, 9):
            raise Skip("fp8 GEMMs need compute capability 8.9 or newer (Ada/Hopper)")
        # ROCm's fp8 formats are the 'fnuz' variants.
        f8 = torch.float8_e4m3fnuz if hip else torch.float8_e4m3fn
        one = torch.ones((), dtype=torch.float32, device=self.device)
        # cuBLASLt fp8 wants A row-major and B column-major (Transformer Engine keeps
        # transposed fp8 copies for the backward GEMMs so that every one has this layout).
        pairs = [(torch.randn(p.m, p.k, device=self.device).to(f8),
                  torch.randn(p.n, p.k, device=self.device).to(f8).t())
                 for _ in range(p.batch)]

        def run():
            for a, b in pairs:
                scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                          use_fast_accum=p.fast_accum)

        run()  # fails here, not inside the timing loop, when the build lacks fp8
        return run

    def gqa_supported(self) -> bool:
        if self._gqa is None:
            torch = self.torch
            q = torch.zeros(1, 2, 4, 8, device=self.device)
            kv = torch.zeros(1, 1, 4, 8, device=self.device)
            try:
                torch.nn.functional.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
                self._gqa = True
            except TypeError:
                self._gqa = False
        return self._gqa

    def attention(self, p: AttentionPlan) -> tuple[Callable[[], object], str]:
        """The call to time and the backend that runs it. The plan's backend first; for
        grouped-query shapes that it refuses, the same backend with k/v materialised per query
        head (same FLOPs; the copy is made before timing); then the default SDPA backend."""
        s = p.shape
        if not s.flash:
            return self.unfused_attention(p), "unfused"
        group = s.heads // s.kv_heads
        attempts = [(p.backend, False)]
        if group > 1:
            attempts.append((p.backend, True))
        if p.backend != "default":
            attempts.append(("default", group > 1))
        refused = []
        for backend, expand in attempts:
            plan = dataclasses.replace(p, backend=backend)
            try:
                fn = self.sdpa_call(plan, expand)
            except RuntimeError as e:
                refused.append(f"{backend}{' kv-expanded' if expand else ''}: {first_line(e)}")
                continue
            ran = backend + (" kv-expanded" if expand else "")
            if refused:
                note(f"{shape_text(s)} {p.dtype}: {'; '.join(refused)}; timing {ran}")
            return fn, ran
        raise Skip("no SDPA backend runs this shape (" + "; ".join(refused) + ")")

    def sdpa_call(self, p: AttentionPlan, expand: bool) -> Callable[[], object]:
        """SDPA over the plan's chunks on its backend; raises RuntimeError if the backend
        cannot run them. `expand`: k/v carry one head per query head."""
        torch = self.torch
        s = p.shape
        dt = self.dtype(p.dtype)
        g = p.backward
        group = s.heads // s.kv_heads
        native_gqa = group > 1 and not expand
        if native_gqa and not self.gqa_supported():
            raise RuntimeError("this torch lacks enable_gqa")
        kv_heads = s.heads if expand else s.kv_heads
        q = self.randn(s.batch, s.heads, s.seq_q, s.head_dim, dtype=dt, grad=g)
        k = self.randn(s.batch, kv_heads, s.seq_kv, s.head_dim, dtype=dt, grad=g)
        v = self.randn(s.batch, kv_heads, s.seq_kv, s.head_dim, dtype=dt, grad=g)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        masks = {}
        for c in p.chunks:
            if c.mask == "lower_right":
                try:
                    from torch.nn.attention.bias import causal_lower_right
                    masks[c] = causal_lower_right(c.q_end - c.q_start, c.kv_len)
                except ImportError:
                    self.note_once("this torch lacks causal_lower_right: using a boolean mask, "
                                   "which the flash backend cannot run")
                    q_len = c.q_end - c.q_start
                    masks[c] = torch.ones(q_len, c.kv_len, dtype=torch.bool,
                                          device=self.device).tril(c.kv_len - q_len)

        def forward():
            outs = []
            for c in p.chunks:
                qc = q[:, :, c.q_start:c.q_end]
                kv = slice(c.kv_start, c.kv_start + c.kv_len)
                kwargs = {"enable_gqa": True} if native_gqa else {}
                if s.dropout:
                    kwargs["dropout_p"] = 0.1
                if c.mask == "causal":
                    kwargs["is_causal"] = True
                elif c.mask == "lower_right":
                    kwargs["attn_mask"] = masks[c]
                outs.append(sdpa(qc, k[:, :, kv], v[:, :, kv], **kwargs))
            return outs

        ctx = self.backend_context(p.backend)
        with ctx():
            outs = forward()
        if self.cuda:
            torch.cuda.synchronize(self.device)
        if not g:
            def run_forward():
                with torch.no_grad(), ctx():
                    forward()
            return run_forward
        douts = [torch.randn_like(o) for o in outs]
        # The backward kernels were fixed by the forward's backend; try one before timing.
        torch.autograd.grad(outs, (q, k, v), douts, retain_graph=True)
        return lambda: torch.autograd.grad(outs, (q, k, v), douts, retain_graph=True)

    def backend_context(self, backend: str):
        torch = self.torch
        if backend == "default":
            return contextlib.nullcontext
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except ImportError:
            if backend != "flash":
                raise RuntimeError(f"this torch cannot select the {backend} SDPA backend")
            return lambda: torch.backends.cuda.sdp_kernel(
                enable_flash=True, enable_math=False, enable_mem_efficient=False)
        chosen = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION"}[backend]
        if not hasattr(SDPBackend, chosen):
            raise RuntimeError(f"this torch has no {chosen} SDPA backend")
        return lambda: sdpa_kernel(getattr(SDPBackend, chosen))

    def unfused_attention(self, p: AttentionPlan) -> Callable[[], object]:
        torch = self.torch
        s = p.shape
        dt = self.dtype(p.dtype)
        g = p.backward
        b, h, kv, sq, skv, d = s.batch, s.heads, s.kv_heads, s.seq_q, s.seq_kv, s.head_dim
        q = self.randn(b * h, sq, d, dtype=dt, grad=g)
        k = self.randn(b, kv, skv, d, dtype=dt, grad=g)
        v = self.randn(b, kv, skv, d, dtype=dt, grad=g)
        scores = torch.empty(b * h, sq, skv, dtype=dt, device=self.device)
        mask = None
        if s.causal:
            # True where masked; bottom-right aligned like Megatron's causal mask with CP.
            mask = torch.ones(sq, skv, dtype=torch.bool, device=self.device).triu(skv - sq + 1)
        scale = 1.0 / math.sqrt(d)

        def forward():
            kk, vv = k, v
            if kv != h:
                kk, vv = k.repeat_interleave(h // kv, 1), v.repeat_interleave(h // kv, 1)
            kk, vv = kk.reshape(b * h, skv, d), vv.reshape(b * h, skv, d)
            x = torch.baddbmm(scores, q, kk.transpose(1, 2), beta=0.0, alpha=scale)
            if mask is not None:
                x = x.masked_fill_(mask, -10000.0)
            x = torch.nn.functional.dropout(torch.softmax(x, dim=-1), DROPOUT_P, training=True)
            return torch.bmm(x, vv)

        return self.pass_of(forward, (q, k, v), g)

    def elementwise(self, p: ElementwisePlan) -> Callable[[], object]:
        torch = self.torch
        F = torch.nn.functional
        dt = self.dtype(p.dtype)
        n, g = p.numel, p.backward
        if p.op == "add":
            calls = proxy_calls(max(1, n // p.launches))
            a, b, c = (self.randn(calls[0][0], dtype=dt) for _ in range(3))

            def run_proxy():
                for _ in range(p.launches):
                    for size, count in calls:
                        for _ in range(count):
                            torch.add(a[:size], b[:size], out=c[:size])
            return run_proxy
        if p.op == "layer_norm":
            x = self.randn(n // NORM_WIDTH, NORM_WIDTH, dtype=dt, grad=g)
            w = self.randn(NORM_WIDTH, dtype=dt, grad=g)
            bias = self.randn(NORM_WIDTH, dtype=dt, grad=g)
            inputs = (x, w, bias)

            def forward():
                return F.layer_norm(x, (NORM_WIDTH,), w, bias)
        elif p.op == "gelu":
            x = self.randn(n, dtype=dt, grad=g)
            inputs = (x,)

            def forward():
                return F.gelu(x)
        else:
            x, r = self.randn(n, dtype=dt, grad=g), self.randn(n, dtype=dt, grad=g)
            inputs = (x, r)

            def forward():
                return F.dropout(x, DROPOUT_P, training=True) + r
        return self.pass_of(forward, inputs, g)

    def pass_of(self, forward: Callable[[], object], inputs: tuple, backward: bool):
        """The call to time: `forward` without autograd, or the backward of one forward."""
        torch = self.torch
        if not backward:
            def run_forward():
                with torch.no_grad():
                    forward()
            return run_forward
        out = forward()
        dout = torch.randn_like(out)
        return lambda: torch.autograd.grad(out, inputs, dout, retain_graph=True)


# ----- command line -----


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="profile_kernels.py",
        description="Measure the kernels a fleetsim experiment emits and write a kernel table.",
    )
    ap.add_argument("experiment", nargs="?", help="experiment TOML (not needed with --template)")
    ap.add_argument("--out", help="kernel table to write (CSV)")
    ap.add_argument("--fleetsim", help="fleetsim binary (default target/release/fleetsim, "
                                       "else fleetsim on PATH)")
    ap.add_argument("--template", help="kernel table to measure instead of fleetsim's export")
    ap.add_argument("--gpu", help="GPU name written to the table (default: from the device)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed calls per kernel")
    ap.add_argument("--iters", type=int, default=50, help="timed calls per kernel (median)")
    ap.add_argument("--device", default="cuda", help="torch device (cpu: smoke test only)")
    ap.add_argument("--clock", choices=CLOCKS, default="steady",
                    help="steady (default): bf16 GEMMs before each call, the power-capped "
                         "clock of a training loop, what fleetsim simulates; burst: cold L2 "
                         "and an idle GPU before each call, as published benchmarks time")
    ap.add_argument("--attention", choices=ATTENTION_BACKENDS, default="megatron",
                    help="SDPA backend of fused attention rows (megatron: cuDNN on Hopper and "
                         "newer, flash elsewhere, as Transformer Engine picks)")
    ap.add_argument("--fp8-fast-accum", choices=FP8_FAST_ACCUM, default="off",
                    help="cuBLASLt's FP8 fast accumulation: off (cuBLASLt's default), on, or "
                         "fprop (forward GEMMs only, as Transformer Engine runs FP8 on Hopper)")
    ap.add_argument("--plan", action="store_true",
                    help="print what would run, one line per kernel, without torch")
    return ap.parse_args(argv)


def load_template(args: argparse.Namespace) -> list[Row]:
    if args.template:
        return read_table(args.template)
    if not args.experiment:
        raise InputError("no experiment (expected EXPERIMENT.toml or --template FILE)")
    fleetsim = find_fleetsim(args.fleetsim)
    with tempfile.TemporaryDirectory(prefix="profile_kernels.") as tmp:
        path = Path(tmp) / "template.csv"
        export_template(fleetsim, args.experiment, path)
        return read_table(path)


def save(path: str, rows: list[Row]) -> None:
    try:
        write_table(path, rows)
    except OSError as e:
        raise InputError(f"{path}: cannot write the kernel table: {e}") from None


def run(args: argparse.Namespace) -> int:
    if args.warmup < 0 or args.iters < 1:
        raise InputError("--warmup must be >= 0 and --iters >= 1")
    if not args.plan and not args.out:
        raise InputError("no output (expected --out TABLE.csv, or --plan)")
    if args.out and not Path(args.out).resolve().parent.is_dir():
        # Fail before a long measurement, not after it.
        raise InputError(f"--out {args.out}: no such directory (expected an existing folder)")
    if args.gpu is not None and (not args.gpu or clean_text(args.gpu) != args.gpu):
        raise InputError(f"--gpu '{args.gpu}' (expected a name without spaces, commas or quotes)")
    rows = load_template(args)
    todo, imported = distinct(rows)
    where = args.template or "fleetsim's export"
    for row in imported:
        note(f"{where}:{row.line}: skipping kernel imported (a fixed time from an imported "
             "workload, nothing to profile)")
    print(f"{len(rows)} rows, {len(todo)} distinct kernels to measure, "
          f"{len(imported)} imported skipped", file=sys.stderr)
    if args.plan:
        backend = args.attention
        if backend == "megatron":
            backend = "cudnn"
            note("--attention megatron: the plan shows cuDNN, what Hopper and newer run; "
                 "older GPUs run flash")
        for row in todo:
            print(plan_line(row, backend, args.fp8_fast_accum))
        return 0

    profiler = Profiler(args.device, args.warmup, args.iters, args.clock, args.attention,
                        args.fp8_fast_accum)
    gpu = args.gpu or (canonical_gpu(profiler.device_name()) if profiler.cuda else None)
    if gpu is None:
        raise InputError(f"--device {args.device} has no GPU name (expected --gpu NAME)")
    if gpu not in KNOWN_GPUS:
        note(f"--gpu {gpu} is not one of fleetsim's built-in GPUs ({' '.join(KNOWN_GPUS)})")
    source = profiler.source()
    measured = []
    for i, row in enumerate(todo, start=1):
        label = f"[{i}/{len(todo)}] {row.dtype} {row.kernel} {row.pass_} {row.shape_str}"
        try:
            t, ran = profiler.measure(row)
        except Skip as e:
            note(f"{label}: skipped: {e}")
            continue
        print(f"{label}: {t:.3f} us (model {row.time_us:.3f} us)", file=sys.stderr)
        row_source = f"{source} attention={ran}" if ran else source
        measured.append(dataclasses.replace(row, gpu=gpu, time_us=t, source=row_source))
        # Written after every row, so an interrupted run keeps what it measured.
        save(args.out, measured)
    save(args.out, measured)
    print(f"wrote {args.out}: {len(measured)} of {len(todo)} kernels measured", file=sys.stderr)
    if todo and not measured:
        raise InputError("no kernel could be measured (see the notes above)")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run(args)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
