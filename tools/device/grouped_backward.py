"""Where a grouped expert GEMM's backward goes (issue 17, second call).

grouped_gemm.py found torch._grouped_mm's autograd backward 10-16% slower than twice the
forward even at 4,096 tokens per expert, and 2-4x at 64-256. This splits it: dgrad and wgrad
each as one grouped GEMM (each weight layout), wgrad into fp32 (Megatron's main_grad),
torch.profiler's kernels of the autograd backward, and Transformer Engine's way for
GroupedLinear (one cuBLAS GEMM per expert over 4 streams, nvte_multi_stream_cublas_gemm).

Usage on the GPU machine: python3 tools/device/grouped_backward.py > grouped-backward.csv
"""

import torch

from timing import report, run

DEV = "cuda"
BF16 = torch.bfloat16


def case(name, g, m, k, n):
    tokens = g * m
    x = torch.randn(tokens, k, device=DEV, dtype=BF16)
    w = torch.randn(g, n, k, device=DEV, dtype=BF16) * 0.02  # (out, in) per expert, as nn.Linear
    w_kn = w.transpose(-2, -1).contiguous()  # (in, out) per expert, row-major
    dy = torch.randn(tokens, n, device=DEV, dtype=BF16)
    offs = torch.full((g,), m, device=DEV, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    flops = 2.0 * tokens * k * n
    prefix = f"{name},{g},{m},{k},{n}"
    gm = torch._grouped_mm
    report(prefix, "fwd x @ w^T (w col-major view)", flops, lambda: gm(x, w.transpose(-2, -1), offs=offs))
    report(prefix, "fwd x @ w_kn (row-major)", flops, lambda: gm(x, w_kn, offs=offs))
    report(prefix, "dgrad dy @ w (row-major)", flops, lambda: gm(dy, w, offs=offs))
    report(prefix, "dgrad dy @ w_kn^T (col-major view)", flops, lambda: gm(dy, w_kn.transpose(-2, -1), offs=offs))
    report(prefix, "wgrad x^T @ dy (x^T col-major view)", flops, lambda: gm(x.t(), dy, offs=offs))
    xt = x.t().contiguous()
    report(prefix, "wgrad xT @ dy (xT row-major copy)", flops, lambda: gm(xt, dy, offs=offs))
    report(prefix, "wgrad x^T @ dy into fp32", flops, lambda: gm(x.t(), dy, offs=offs, out_dtype=torch.float32))
    report(prefix, "dense wgrad, one GEMM over all tokens", flops, lambda: torch.mm(x.t(), dy))
    main_grad = torch.zeros(g, k, n, device=DEV, dtype=torch.float32)
    report(prefix, "wgrad then main_grad += (unfused fp32 accumulation)", flops, lambda: main_grad.add_(gm(x.t(), dy, offs=offs)))
    # Transformer Engine's GroupedLinear: one cuBLAS GEMM per expert, round-robin over 4 streams.
    streams = [torch.cuda.Stream() for _ in range(4)]
    xs, dys = x.split(m), dy.split(m)
    outs_f = [torch.empty(m, n, device=DEV, dtype=BF16) for _ in range(g)]
    outs_d = [torch.empty(m, k, device=DEV, dtype=BF16) for _ in range(g)]
    outs_w = [torch.empty(k, n, device=DEV, dtype=BF16) for _ in range(g)]

    def multi(op):
        def run():
            main = torch.cuda.current_stream()
            for s in streams:
                s.wait_stream(main)
            for i in range(g):
                with torch.cuda.stream(streams[i % 4]):
                    op(i)
            for s in streams:
                main.wait_stream(s)
        return run

    report(prefix, "fwd per expert on 4 streams", flops, multi(lambda i: torch.mm(xs[i], w[i].t(), out=outs_f[i])))
    report(prefix, "dgrad per expert on 4 streams", flops, multi(lambda i: torch.mm(dys[i], w[i], out=outs_d[i])))
    report(prefix, "wgrad per expert on 4 streams", flops, multi(lambda i: torch.mm(xs[i].t(), dys[i], out=outs_w[i])))
    # What autograd runs for the backward.
    try:
        from torch.profiler import ProfilerActivity, profile

        xa = x.clone().requires_grad_()
        wa = w.clone().requires_grad_()
        for _ in range(2):
            gm(xa, wa.transpose(-2, -1), offs=offs).backward(dy)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            gm(xa, wa.transpose(-2, -1), offs=offs).backward(dy)
            torch.cuda.synchronize()
        totals = {}
        for e in prof.events():
            if str(e.device_type).endswith("CUDA"):
                key = e.name[:70].replace(",", ";")
                n_, t_ = totals.get(key, (0, 0.0))
                dt = getattr(e, "device_time", None) or getattr(e, "cuda_time", 0.0)
                totals[key] = (n_ + 1, t_ + dt)
        for key, (cnt, t) in sorted(totals.items(), key=lambda kv: -kv[1][1])[:6]:
            print(f"{prefix},autograd fwd+bwd kernel x{cnt}: {key},{t:.2f},", flush=True)
    except Exception as e:
        print(f"{prefix},profiler failed: {type(e).__name__}: {str(e)[:100]},,".replace("\n", " "), flush=True)
    del x, w, w_kn, dy, xt, main_grad, outs_f, outs_d, outs_w
    torch.cuda.empty_cache()


def main():
    print("case,experts,tokens_per_expert,k,n,what,us,tflops", flush=True)
    torch.manual_seed(0)
    case("dsv3-ep64-fc1", 4, 4096, 7168, 4096)
    case("dsv3-ep64-fc2", 4, 4096, 2048, 7168)
    case("dsv3-ep8-fc1", 32, 512, 7168, 4096)
    case("dsv3-ep8-fc1", 32, 128, 7168, 4096)
    case("mixtral-ep1-fc1", 8, 1024, 4096, 28672)
    case("fine-ep8-fc1", 16, 256, 2048, 1536)


if __name__ == "__main__":
    run(main)
