"""Causal attention forward + backward with and without attention dropout, per backend.

Megatron-LM's GPT defaults to `--attention-dropout 0.1` (megatron/training/arguments.py), and
Transformer Engine then runs dropout inside the fused attention kernel (cuDNN on Hopper; TE
`DotProductAttention`, `attention_dropout`). This times what that costs at the IR's shapes of
the Megatron-LM README rows (e2e_iterations.csv rows 10-18: per-GPU heads at TP 1-8,
sequence 4096, head dim 128, micro-batch 1) and GPT-3 175B's (96 heads / TP 8, 2048).

For each shape and each of: SDPA's default backend, forced cuDNN, forced FlashAttention; with
dropout_p 0 and 0.1: the median of `--iters` fwd+bwd timings (CUDA events) after `--warm`
seconds of the same work, so the clock has settled under load. A backend that refuses a case
prints `refused` with PyTorch's reason.

Usage: python3 attention_dropout.py [--warm 1.5] [--iters 15] > out.txt
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

dev = torch.device("cuda")
bf16 = torch.bfloat16

# (name, batch, heads per GPU, seq, head_dim)
SHAPES = [
    ("readme-row10 tp1", 1, 16, 4096, 128),
    ("readme-row12 tp4", 1, 12, 4096, 128),
    ("readme-row13 tp8", 1, 7, 4096, 128),
    ("readme-row14 tp8", 1, 8, 4096, 128),
    ("readme-row15 tp8", 1, 10, 4096, 128),
    ("readme-row18 tp8", 1, 18, 4096, 128),
    ("gpt3-175b tp8", 1, 12, 2048, 128),
]

BACKENDS = [
    ("default", None),
    ("cudnn", SDPBackend.CUDNN_ATTENTION),
    ("flash", SDPBackend.FLASH_ATTENTION),
]


def fwd_bwd(q, k, v, grad, p):
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)
    o.backward(grad)


def timed(fn, warm, iters):
    fn()
    torch.cuda.synchronize()
    end = time.time() + warm
    while time.time() < end:
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--warm", type=float, default=1.5)
    ap.add_argument("--iters", type=int, default=15)
    args = ap.parse_args()
    print(f"torch {torch.__version__} cudnn {torch.backends.cudnn.version()} "
          f"{torch.cuda.get_device_name()}", flush=True)
    print("shape,batch,heads,seq,head_dim,backend,dropout_p,ms_fwd_bwd,model_tflops", flush=True)
    for name, b, h, s, d in SHAPES:
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=bf16, requires_grad=True) for _ in range(3))
        grad = torch.randn(b, h, s, d, device=dev, dtype=bf16)
        # Megatron's count: fwd 4·b·h·s²·d (full square), fwd + bwd 3×.
        flops = 3 * 4 * b * h * s * s * d
        for label, backend in BACKENDS:
            for p in (0.0, 0.1):
                def fn():
                    fwd_bwd(q, k, v, grad, p)
                try:
                    if backend is None:
                        ms = timed(fn, args.warm, args.iters)
                    else:
                        with sdpa_kernel([backend]):
                            ms = timed(fn, args.warm, args.iters)
                    print(f"{name},{b},{h},{s},{d},{label},{p},{ms:.4f},{flops / ms / 1e9:.1f}", flush=True)
                except Exception as e:  # a backend that does not take this case
                    reason = str(e).splitlines()[0][:160].replace(",", ";")
                    print(f"{name},{b},{h},{s},{d},{label},{p},refused,{reason}", flush=True)
                q.grad = k.grad = v.grad = None
        del q, k, v, grad
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
