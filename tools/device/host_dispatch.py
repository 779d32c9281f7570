"""What the host costs to issue GPU work from eager PyTorch on the device machine's CPU (issue 17).

Measures, on whatever x86 host the GPU machine has, the quantities configs/hosts.toml states
for the `x86` host, so the derived numbers there can be checked against a reading:
  * op: one PyTorch op called from Python (tiny tensors, so the GPU is never the bottleneck),
    with and without autograd recording;
  * module: torch.nn.Linear forward at NVIDIA/TransformerEngine#2053's shape (hidden 2048,
    8,192 tokens, BF16), the case that issue measured at 13.5 us of CPU on a DGX H100;
  * a GPT layer (Megatron's order of ops, plain PyTorch, no Transformer Engine, no TP
    communication) forward + backward: kernels per layer, host time per layer eager and
    replayed as CUDA graphs (torch.cuda.make_graphed_callables), at a tiny shape (host-bound)
    and at GPT-3 175B's TP 4 shard (sequence 2,048, micro-batch 1), where it also gives the
    GPU time per layer;
  * the host's round trip for a value the GPU computed (a dropless MoE's tokens per expert).
Host times are wall-clock on the issuing thread before the synchronise, with the launch queue
kept below its depth so the host never waits for the GPU. Medians of repeats.

Usage on the GPU machine: python3 tools/device/host_dispatch.py > host-dispatch.csv
"""

import csv
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from timing import run

DEV = "cuda"
BF16 = torch.bfloat16


def row(what, value, unit, note=""):
    csv.writer(sys.stdout, lineterminator="\n").writerow([what, f"{value:.3f}", unit, note])
    sys.stdout.flush()


def host_us_per_call(fn, calls, repeats=9):
    """Median over `repeats` of the host time per call of `calls` back-to-back calls."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        samples.append((t1 - t0) / calls * 1e6)
    return statistics.median(samples)


def gpu_us_per_call(fn, calls, repeats=5):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(samples)


class GptLayer(torch.nn.Module):
    """One TP shard of a Megatron GPT layer, ops in Megatron's order, plain PyTorch."""

    def __init__(self, hidden, heads, ffn, tp):
        super().__init__()
        self.heads = heads // tp
        self.head_dim = hidden // heads
        self.ln1 = torch.nn.LayerNorm(hidden)
        self.qkv = torch.nn.Linear(hidden, 3 * hidden // tp)
        self.proj = torch.nn.Linear(hidden // tp, hidden)
        self.ln2 = torch.nn.LayerNorm(hidden)
        self.fc1 = torch.nn.Linear(hidden, ffn // tp)
        self.fc2 = torch.nn.Linear(ffn // tp, hidden)

    def forward(self, x):
        seq, batch, _ = x.shape
        qkv = self.qkv(self.ln1(x)).view(seq, batch, self.heads, 3 * self.head_dim)
        q, k, v = (t.permute(1, 2, 0, 3) for t in qkv.split(self.head_dim, dim=-1))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = a.permute(2, 0, 1, 3).reshape(seq, batch, -1)
        x = x + self.proj(a)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


def kernels_per_call(fn):
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kinds = [e for e in prof.events() if str(e.device_type).endswith("CUDA")]
    return len(kinds)


def layer_case(name, hidden, heads, ffn, tp, seq, layers):
    layer = GptLayer(hidden, heads, ffn, tp).to(DEV, BF16)
    x = torch.randn(seq, 1, hidden, device=DEV, dtype=BF16, requires_grad=True)
    grad = torch.randn_like(x)

    def eager():
        y = x
        for _ in range(layers):
            y = layer(y)
        y.backward(grad)

    try:
        k = kernels_per_call(eager) / layers
        row(f"{name}: GPU kernels per layer fwd+bwd (torch.profiler)", k, "kernels")
    except Exception as e:  # the profiler is a nicety: report and go on
        row(f"{name}: GPU kernels per layer fwd+bwd (torch.profiler failed: {type(e).__name__})", -1, "kernels")
    host = host_us_per_call(eager, 1) / layers
    gpu = gpu_us_per_call(eager, 1) / layers
    row(f"{name}: eager host time per layer fwd+bwd", host, "us", f"{layers} layers per call")
    row(f"{name}: eager GPU time per layer fwd+bwd", gpu, "us", "CUDA events")
    layer.zero_grad(set_to_none=False)
    graphed = torch.cuda.make_graphed_callables(layer, (x.detach().requires_grad_(),))

    def replay():
        y = x
        for _ in range(layers):
            y = graphed(y)
        y.backward(grad)

    host = host_us_per_call(replay, 1) / layers
    gpu = gpu_us_per_call(replay, 1) / layers
    row(f"{name}: CUDA-graph host time per layer fwd+bwd", host, "us", "make_graphed_callables")
    row(f"{name}: CUDA-graph GPU time per layer fwd+bwd", gpu, "us", "CUDA events")
    del layer, graphed
    torch.cuda.empty_cache()


def main():
    print("what,value,unit,note")
    torch.manual_seed(0)
    a = torch.randn(64, device=DEV)
    b = torch.randn(64, device=DEV)
    c = torch.empty(64, device=DEV)
    row("torch.add(a, b, out=c), 64 floats, no autograd", host_us_per_call(lambda: torch.add(a, b, out=c), 200), "us")
    ag = torch.randn(64, device=DEV, requires_grad=True)
    row("ag + b, autograd recording", host_us_per_call(lambda: ag + b, 200), "us")
    xs = torch.randn(16, 256, device=DEV, dtype=BF16, requires_grad=True)
    w = torch.ones(256, device=DEV, dtype=BF16, requires_grad=True)
    bias = torch.zeros(256, device=DEV, dtype=BF16, requires_grad=True)
    row("F.layer_norm 16x256 bf16, autograd", host_us_per_call(lambda: F.layer_norm(xs, (256,), w, bias), 200), "us")
    row("F.gelu 16x256 bf16, autograd", host_us_per_call(lambda: F.gelu(xs), 200), "us")
    lin_small = torch.nn.Linear(256, 256).to(DEV, BF16)
    row("nn.Linear 256->256 on 16 tokens bf16, autograd", host_us_per_call(lambda: lin_small(xs), 200), "us")
    lin = torch.nn.Linear(2048, 2048, bias=False).to(DEV, BF16)
    xl = torch.randn(8192, 2048, device=DEV, dtype=BF16, requires_grad=True)
    row(
        "nn.Linear 2048->2048 on 8192 tokens bf16 forward (TransformerEngine#2053's shape)",
        host_us_per_call(lambda: lin(xl), 100),
        "us",
        "DGX H100 13.5 us in that issue",
    )
    row("its GPU time", gpu_us_per_call(lambda: lin(xl), 20), "us")
    counts = torch.ones(8, device=DEV, dtype=torch.int64)
    row(
        "tokens-per-expert round trip: counts.add_(1) then .tolist()",
        host_us_per_call(lambda: counts.add_(1).tolist(), 50),
        "us",
        "one launch, a device-to-host copy and the wait",
    )
    del lin, xl
    layer_case("tiny GPT layer (h 256, 4 heads, seq 128)", 256, 4, 1024, 1, 128, 8)
    layer_case("GPT-3 175B TP 4 shard (h 12288, seq 2048, mbs 1)", 12288, 96, 49152, 4, 2048, 4)


if __name__ == "__main__":
    run(main)
