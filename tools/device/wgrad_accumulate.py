"""A weight gradient accumulated into the fp32 main gradient, as Megatron runs it (issue 17,
third call).

Megatron-Core's --gradient-accumulation-fusion (on by default) has Transformer Engine's wgrad
GEMM read and write the fp32 main_grad (cuBLAS beta = 1, fp32 C and D) instead of writing a
BF16 gradient. With few tokens per expert the GEMM is then bound by those 8 bytes per weight
element. Timed with cuBLAS through torch.baddbmm / torch.addmm with out_dtype=float32 (BF16
inputs, fp32 accumulator, beta 1), beside the BF16-output GEMM of the same shape.

Usage on the GPU machine: python3 tools/device/wgrad_accumulate.py > wgrad-accumulate.csv
"""

import torch

from timing import report, run

DEV = "cuda"
BF16 = torch.bfloat16


def case(name, g, m, k, n):
    """Wgrad of `g` experts (or one dense weight, g = 1): (k x m) @ (m x n) each."""
    x = torch.randn(g, m, k, device=DEV, dtype=BF16)
    dy = torch.randn(g, m, n, device=DEV, dtype=BF16)
    main_grad = torch.zeros(g, k, n, device=DEV, dtype=torch.float32)
    xt = x.transpose(1, 2)
    flops = 2.0 * g * m * k * n
    prefix = f"{name},{g},{m},{k},{n}"
    report(prefix, "wgrad bf16 out (bmm)", flops, lambda: torch.bmm(xt, dy))
    report(prefix, "wgrad into fp32 main_grad (baddbmm beta=1 out_dtype=float32)", flops,
           lambda: torch.baddbmm(main_grad, xt, dy, out_dtype=torch.float32))
    report(prefix, "wgrad fp32 out, no accumulate (bmm out_dtype=float32)", flops,
           lambda: torch.bmm(xt, dy, out_dtype=torch.float32))
    if g == 1:
        mg = main_grad[0]
        report(prefix, "dense wgrad into fp32 main_grad (addmm out_dtype=float32)", flops,
               lambda: torch.addmm(mg, xt[0], dy[0], out_dtype=torch.float32))
    del x, dy, main_grad
    torch.cuda.empty_cache()


def main():
    print("case,experts,tokens_per_expert,k,n,what,us,tflops", flush=True)
    torch.manual_seed(0)
    for m in (64, 128, 256, 512, 1024, 4096):
        case("dsv3-ep8-fc1", 32, m, 7168, 4096)
    for m in (256, 1024, 4096):
        case("dsv3-ep64-fc1", 4, m, 7168, 4096)
    for m in (256, 1024):
        case("fine-ep8-fc1", 16, m, 2048, 1536)
    case("gpt3-tp4-fc1-dense", 1, 2048, 12288, 12288)
    case("llama3-405b-tp8-fc1-dense", 1, 8192, 16384, 6656)


if __name__ == "__main__":
    run(main)
