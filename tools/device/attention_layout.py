"""cuDNN fused attention on the tensors Megatron-Core hands Transformer Engine, against
contiguous ones (issue 10). Megatron's linear_qkv writes [s, b, heads*(3*d)] (GQA: query
groups interleaved), and core attention gets q, k, v as strided views of it in the sbhd
layout; PyTorch SDPA takes [b, h, s, d], so the views are permuted, not copied. Each shape is
timed steady (bf16 GEMM heaters before every call), forward and forward+backward, for
(a) contiguous [b, h, s, d] tensors and (b) Megatron's interleaved sbhd views.
Usage: python3 attention_layout.py > layout.txt
"""
import statistics
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

dev = torch.device("cuda")
bf = torch.bfloat16
heat_a = torch.randn(8192, 8192, device=dev, dtype=bf)
heat_b = torch.randn_like(heat_a)


def heat(n=2):
    for _ in range(n):
        torch.mm(heat_a, heat_b)


def timed(fn, iters=15, warm=4):
    for _ in range(warm):
        fn()
    t = []
    for _ in range(iters):
        heat()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record()
        torch.cuda.synchronize()
        t.append(s.elapsed_time(e) * 1000)
    return statistics.median(t)


def case(b, h, s, d, causal=True):
    flops_fwd = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
    out = []
    for layout in ("contiguous", "megatron-sbhd"):
        if layout == "contiguous":
            q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=bf, requires_grad=True) for _ in range(3))
            leaves = (q, k, v)
        else:
            mixed = torch.randn(s, b, h, 3 * d, device=dev, dtype=bf, requires_grad=True)
            leaves = (mixed,)
            qs, ks, vs = torch.split(mixed, [d, d, d], dim=3)
            q, k, v = (t.permute(1, 2, 0, 3) for t in (qs, ks, vs))
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        do = torch.randn_like(o)

        def fwd():
            with torch.no_grad(), sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        def bwd():
            torch.autograd.grad(o, leaves, do, retain_graph=True)

        tf, tb = timed(fwd), timed(bwd)
        out.append((layout, tf, tb))
        print(f"b={b} h={h} s={s} d={d} causal={causal} {layout:14s} fwd {tf:9.1f} us "
              f"({flops_fwd / tf / 1e6:5.0f} TF/s) bwd {tb:9.1f} us ({2.5 * flops_fwd / tb / 1e6:5.0f} TF/s)",
              flush=True)
    (_, f0, b0), (_, f1, b1) = out
    print(f"  megatron/contiguous: fwd {f1 / f0:.3f} bwd {b1 / b0:.3f}", flush=True)


print(torch.__version__, torch.backends.cudnn.version(), torch.cuda.get_device_name(), flush=True)
t = 0
heat(200)
for args in [(1, 16, 4096, 128), (1, 16, 16384, 128), (1, 8, 32768, 128), (1, 32, 4096, 128),
             (1, 16, 4096, 64)]:
    try:
        case(*args)
    except Exception as e:  # noqa: BLE001 - report and go on
        print(f"{args}: failed {type(e).__name__}: {e}", flush=True)
