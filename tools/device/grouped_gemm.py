"""MoE expert GEMMs at the per-expert token counts MoE recipes give (issue 17).

Times, forward and forward + backward (dgrad and wgrad), the routed experts' fc1 and fc2 of a
rank as one grouped GEMM (torch._grouped_mm: CUTLASS grouped GEMM on Hopper, the kernel
family TransformerEngine's GroupedLinear and torchtitan use), as Megatron-Core's
SequentialMLP runs them (one torch.mm per expert), and, for reference, as one dense GEMM over
all the rank's tokens. FP8 forward through torch._scaled_grouped_mm (row-wise scales) where
it runs. Balanced token counts and skewed ones with the same total. Back-to-back CUDA-event
timing after warm-up, so the clock is the sustained one; mean of the timed repeats.

Usage on the GPU machine: python3 tools/device/grouped_gemm.py > grouped-gemm.csv
"""

import torch

from timing import timed_us, run

DEV = "cuda"
BF16 = torch.bfloat16
ALIGN = 16  # torchtitan pads each expert's rows to 16 for _grouped_mm


def skewed(total, experts, ratio):
    """Counts falling geometrically from the most to the least loaded expert (first/last = ratio),
    multiples of ALIGN, summing to `total`."""
    weights = [ratio ** (-(i / max(experts - 1, 1))) for i in range(experts)]
    raw = [total * w / sum(weights) for w in weights]
    counts = [max(ALIGN, int(r // ALIGN) * ALIGN) for r in raw]
    counts[0] += total - sum(counts)
    return counts


def case(name, counts, k, n, dense=True, sequential=False, fp8=False):
    g, m = len(counts), sum(counts)
    x = torch.randn(m, k, device=DEV, dtype=BF16, requires_grad=True)
    w = (torch.randn(g, n, k, device=DEV, dtype=BF16) * 0.02).requires_grad_()
    offs = torch.tensor(counts, device=DEV, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    dy = torch.randn(m, n, device=DEV, dtype=BF16)
    flops = 2.0 * m * k * n
    desc = "/".join(str(c) for c in counts) if g <= 8 else f"{counts[0]}..{counts[-1]}"
    prefix = f"{name},{g},{k},{n},{m},{desc}"

    def fwd():
        return torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)

    def fwd_bwd():
        fwd().backward(dy)

    with torch.no_grad():
        f = timed_us(fwd)
    try:
        fb = timed_us(fwd_bwd)
        print(f"{prefix},grouped,{f:.2f},{flops / f / 1e6:.1f},{fb - f:.2f},{2 * flops / (fb - f) / 1e6:.1f}", flush=True)
    except Exception as e:
        print(f"{prefix},grouped (backward failed: {type(e).__name__}),{f:.2f},{flops / f / 1e6:.1f},,", flush=True)
    if sequential:
        starts = [0]
        for c in counts:
            starts.append(starts[-1] + c)

        def seq_fwd():
            return [torch.mm(x[starts[i]:starts[i + 1]], w[i].t()) for i in range(g)]

        def seq_fwd_bwd():
            outs = seq_fwd()
            torch.autograd.backward(outs, [dy[starts[i]:starts[i + 1]] for i in range(g)])

        with torch.no_grad():
            f = timed_us(seq_fwd)
        fb = timed_us(seq_fwd_bwd)
        print(f"{prefix},sequential,{f:.2f},{flops / f / 1e6:.1f},{fb - f:.2f},{2 * flops / (fb - f) / 1e6:.1f}", flush=True)
    if dense:
        w2 = w[0].detach()
        with torch.no_grad():
            f = timed_us(lambda: torch.mm(x, w2.t()))
        print(f"{prefix},dense-reference,{f:.2f},{flops / f / 1e6:.1f},,", flush=True)
    if fp8:
        try:
            x8 = x.detach().to(torch.float8_e4m3fn)
            w8 = w.detach().to(torch.float8_e4m3fn)
            sa = torch.ones(m, device=DEV, dtype=torch.float32)
            sb = torch.ones(g, n, device=DEV, dtype=torch.float32)
            f = timed_us(lambda: torch._scaled_grouped_mm(x8, w8.transpose(-2, -1), sa, sb, offs=offs, out_dtype=BF16))
            print(f"{prefix},grouped-fp8-rowwise,{f:.2f},{flops / f / 1e6:.1f},,", flush=True)
        except Exception as e:
            print(f"{prefix},grouped-fp8-rowwise failed: {type(e).__name__}: {str(e)[:120]},,,,".replace("\n", " "), flush=True)
    del x, w, dy
    torch.cuda.empty_cache()


def main():
    print("case,experts,k,n,tokens,tokens_per_expert,layout,fwd_us,fwd_tflops,bwd_us,bwd_tflops", flush=True)
    torch.manual_seed(0)
    # DeepSeek-V3: hidden 7168, expert FFN 2048 (fc1 gate+up 4096), 256 experts.
    for ep, experts, per in [(64, 4, [128, 256, 512, 1024, 2048, 4096, 8192]), (8, 32, [64, 128, 256, 512, 1024, 2048])]:
        for m in per:
            seq = m in (512, 4096) and experts == 4 or m == 512 and experts == 32
            case(f"dsv3-ep{ep}-fc1", [m] * experts, 7168, 4096, sequential=seq, fp8=m in (512, 2048, 4096))
            case(f"dsv3-ep{ep}-fc2", [m] * experts, 2048, 7168, sequential=seq, fp8=m in (512, 2048, 4096))
    # The same totals, skewed 4:1 and 16:1 from the most to the least loaded local expert.
    for experts, per in [(4, 4096), (4, 1024), (32, 512)]:
        for ratio in (4.0, 16.0):
            counts = skewed(per * experts, experts, ratio)
            case(f"dsv3-ep{256 // experts}-fc1-skew{int(ratio)}", counts, 7168, 4096, dense=False)
            case(f"dsv3-ep{256 // experts}-fc2-skew{int(ratio)}", counts, 2048, 7168, dense=False)
    # Mixtral 8x7B without EP: hidden 4096, FFN 14336 (fc1 28672).
    for m in [256, 1024, 4096]:
        case("mixtral-ep1-fc1", [m] * 8, 4096, 28672, sequential=m == 1024)
        case("mixtral-ep1-fc2", [m] * 8, 14336, 4096, sequential=m == 1024)
    # Qwen3-30B-A3B-like fine-grained experts at EP 8: hidden 2048, expert FFN 768, 16 local.
    for m in [64, 256, 1024, 4096]:
        case("fine-ep8-fc1", [m] * 16, 2048, 1536, sequential=m == 256)
        case("fine-ep8-fc2", [m] * 16, 768, 2048, sequential=m == 256)


if __name__ == "__main__":
    run(main)
