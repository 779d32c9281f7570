"""Whole-model micro-batches (forward + backward) of a Megatron-Core GPT's per-GPU shard, eager
PyTorch, in steady state: what one data-parallel rank computes per micro-batch, to hold against
fleetsim's compute for the same rank (`fleetsim check --kernels`).

Per GPU, as Megatron-Core r0.8 runs it (megatron/core/models/gpt/gpt_model.py):
- learned position + word embedding (vocab-parallel: V/TP rows), hidden dropout 0.1;
- each layer: LayerNorm, QKV, causal attention (SDPA's default backend: cuDNN on Hopper), output
  projection, bias-dropout-add, LayerNorm, FC1, GeLU, FC2, bias-dropout-add;
- final LayerNorm, the output layer (V/TP rows, untied), and Megatron's fp32 vocab-parallel
  cross entropy (tensor_parallel/cross_entropy.py: max, subtract, exp, sum, normalise; backward
  softmax minus one-hot, times the loss gradient);
- weight gradients accumulated into fp32 main grads (gradient_accumulation_fusion: the wgrad GEMM
  writes fp32 with beta = 1), as `torch.addmm(..., out_dtype=torch.float32)`.
With TP > 1 and sequence parallelism, LayerNorms and dropout-adds run on s/TP tokens and the
all-gather / reduce-scatter around each GEMM pair are stood in for by local copies (no
communication), named `tp_standin` in the breakdown.

Usage: python3 model_step.py [--warm-seconds 4] [--iters 5] [--attention-dropout 0.1] > out.txt
Prints one `case` line per case, then its kernel-class breakdown from torch.profiler.
"""
import argparse, math, sys, time
import torch
import torch.nn.functional as F

dev = torch.device("cuda")
bf16 = torch.bfloat16
WGRAD_FP32 = True  # cleared if torch.addmm has no out_dtype
ATTENTION_DROPOUT = 0.0  # --attention-dropout: Megatron-LM's GPT default is 0.1


def wgrad_accumulate(main, a, b):
    """main (fp32) += a @ b with bf16 inputs, in the GEMM (Megatron's fused wgrad accumulation)."""
    global WGRAD_FP32
    if WGRAD_FP32:
        try:
            torch.addmm(main, a, b, out_dtype=torch.float32, out=main)
            return
        except (TypeError, RuntimeError) as e:
            print(f"note: addmm out_dtype unavailable ({e}); wgrad in bf16 then added", flush=True)
            WGRAD_FP32 = False
    main.add_(a @ b)


class Linear(torch.autograd.Function):
    """y = x W^T + b; backward returns dgrad and accumulates wgrad and bias grad in fp32 mains."""

    @staticmethod
    def forward(ctx, x, w, b, main_w, main_b):
        ctx.save_for_backward(x, w)
        ctx.mains = (main_w, main_b)
        return F.linear(x, w, b)

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved_tensors
        main_w, main_b = ctx.mains
        gx = gy @ w
        wgrad_accumulate(main_w, gy.t(), x)
        if main_b is not None:
            main_b.add_(gy.sum(0, dtype=torch.float32))
        return gx, None, None, None, None


class Embedding(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ids, table, main):
        ctx.save_for_backward(ids)
        ctx.main = main
        return F.embedding(ids, table)

    @staticmethod
    def backward(ctx, gy):
        (ids,) = ctx.saved_tensors
        ctx.main.index_add_(0, ids, gy.float())
        return None, None, None


class VocabParallelCrossEntropy(torch.autograd.Function):
    """Megatron-Core's tensor_parallel/cross_entropy.py on one rank (its all-reduces omitted)."""

    @staticmethod
    def forward(ctx, logits, target):
        x = logits.float()
        x_max = x.max(dim=-1)[0]
        x.sub_(x_max.unsqueeze(-1))
        predicted = x.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        torch.exp(x, out=x)
        sum_exp = x.sum(dim=-1)
        loss = torch.log(sum_exp) - predicted
        x.div_(sum_exp.unsqueeze(-1))
        ctx.save_for_backward(x, target)
        return loss

    @staticmethod
    def backward(ctx, g):
        softmax, target = ctx.saved_tensors
        grad = softmax  # in place, as Megatron does
        grad.scatter_add_(-1, target.unsqueeze(-1), torch.full_like(target, -1.0, dtype=grad.dtype).unsqueeze(-1))
        grad.mul_(g.unsqueeze(-1))
        return grad.to(bf16), None


class Shard:
    def __init__(self, layers, h, ffn, heads, seq, vocab, tp, mbs, llama=False):
        self.h, self.ffn, self.heads, self.seq, self.vocab, self.tp, self.mbs = h, ffn, heads, seq, vocab, tp, mbs
        self.llama = llama  # SwiGLU, RMSNorm, no biases, no position table (rotary left out)
        self.hq = heads // tp
        self.d = h // heads
        self.params = []

        def p(*shape, scale=0.02):
            w = (torch.randn(*shape, device=dev, dtype=bf16) * scale)
            m = torch.zeros(*shape, device=dev, dtype=torch.float32)
            self.params.append((w, m))
            return w, m

        self.word = p(vocab // tp, h)
        self.pos = p(seq, h)  # unused by llama
        for table, _ in (self.word, self.pos):  # so that autograd runs the embedding's backward
            table.requires_grad_(True)
        self.layers = []
        norm = (lambda: torch.nn.RMSNorm(h, device=dev, dtype=bf16)) if llama else (lambda: torch.nn.LayerNorm(h, device=dev, dtype=bf16))
        bias = (lambda n: (None, None)) if llama else (lambda n: p(n, scale=0.0))
        up = (2 if llama else 1) * ffn // tp
        for _ in range(layers):
            L = {}
            L["ln1"] = norm()
            L["qkv"] = p(3 * self.hq * self.d, h) + bias(3 * self.hq * self.d)
            L["proj"] = p(h, self.hq * self.d) + bias(h)
            L["ln2"] = norm()
            L["fc1"] = p(up, h) + bias(up)
            L["fc2"] = p(h, ffn // tp) + bias(h)
            self.layers.append(L)
        self.lnf = norm()
        self.out = p(vocab // tp, h)
        tokens = seq * mbs
        self.ids = torch.randint(0, vocab // tp, (tokens,), device=dev)
        self.pos_ids = torch.arange(seq, device=dev).repeat(mbs)
        self.target = torch.randint(0, vocab // tp, (tokens,), device=dev)

    def gather(self, x):  # SP all-gather stand-in: s/TP tokens -> s tokens
        return x if self.tp == 1 else torch.cat([x] * self.tp, dim=0)

    def scatter(self, x):  # SP reduce-scatter stand-in: s tokens -> s/TP tokens
        return x if self.tp == 1 else x.view(self.tp, -1, x.shape[-1]).sum(0)

    def local(self, x):  # the rank's s/TP tokens
        return x if self.tp == 1 else x[: x.shape[0] // self.tp]

    def layer(self, L, x):
        s, b, hq, d = self.seq, self.mbs, self.hq, self.d
        w, mw, bb, mb = L["qkv"]
        qkv = Linear.apply(self.gather(L["ln1"](x)), w, bb, mw, mb)
        q, k, v = qkv.view(s, b, hq, 3, d).unbind(3)
        q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=ATTENTION_DROPOUT)
        o = o.permute(2, 0, 1, 3).reshape(s * b, hq * d)
        w, mw, bb, mb = L["proj"]
        x = x + F.dropout(self.scatter(Linear.apply(o, w, bb, mw, mb)), 0.1)
        w, mw, bb, mb = L["fc1"]
        u = Linear.apply(self.gather(L["ln2"](x)), w, bb, mw, mb)
        if self.llama:
            a, g = u.chunk(2, dim=-1)
            u = F.silu(a) * g
        else:
            u = F.gelu(u, approximate="tanh")
        w, mw, bb, mb = L["fc2"]
        return x + F.dropout(self.scatter(Linear.apply(u, w, bb, mw, mb)), 0.1)

    def micro_batch(self):
        (word, mword), (pos, mpos) = self.word, self.pos
        x = Embedding.apply(self.ids, word, mword)
        if not self.llama:
            x = x + Embedding.apply(self.pos_ids, pos, mpos)
        x = F.dropout(self.local(x), 0.1)
        for L in self.layers:
            x = self.layer(L, x)
        w, mw = self.out
        logits = Linear.apply(self.gather(self.lnf(x)), w, None, mw, None)
        loss = VocabParallelCrossEntropy.apply(logits, self.target).mean()
        loss.backward()

    def head(self):
        """Final LayerNorm, output layer and cross entropy alone, forward + backward."""
        x = torch.randn(self.seq * self.mbs // self.tp, self.h, device=dev, dtype=bf16, requires_grad=True)
        w, mw = self.out
        logits = Linear.apply(self.gather(self.lnf(x)), w, None, mw, None)
        VocabParallelCrossEntropy.apply(logits, self.target).mean().backward()

    def model_flops(self):
        """Megatron's count per micro-batch (fwd + bwd = 3x forward; causal attention counted full)."""
        s, b, h, f, tp = self.seq, self.mbs, self.h, self.ffn, self.tp
        per_layer = 2 * s * b * (3 * h * h + h * h + (3 if self.llama else 2) * h * f) / tp + 2 * 2 * b * s * s * h / tp
        return 3 * (len(self.layers) * per_layer + 2 * s * b * h * self.vocab / tp)


def steady_time(fn, warm_seconds, iters):
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    t0 = time.time()
    while time.time() - t0 < warm_seconds:  # reach the power-capped clock first
        fn()
        torch.cuda.synchronize()
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    st.record()
    for _ in range(iters):
        fn()
    en.record()
    torch.cuda.synchronize()
    return st.elapsed_time(en) / iters


def kernel_class(name):
    n = name.lower()
    if any(t in n for t in ("sdpa", "fmha", "flash", "attention", "attn")):
        return "attention"
    if any(t in n for t in ("gemm", "nvjet", "cutlass", "xmma", "cublas", "sm90_", "sm80_")):
        return "gemm"
    if "cat" in n or "copy" in n:
        return "copy"
    if "reduce" in n or "sum" in n:
        return "reduce"
    return "elementwise"


def breakdown(fn):
    """GPU time per kernel class, and the GPU's idle time, over one call of fn."""
    from torch.profiler import profile, ProfilerActivity

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.elapsed_us() > 0]
    by_class, names = {}, {}
    intervals = []
    for e in kernels:
        c = kernel_class(e.name)
        us = e.time_range.elapsed_us()
        by_class[c] = by_class.get(c, 0.0) + us
        names.setdefault(c, {})
        names[c][e.name[:90]] = names[c].get(e.name[:90], 0.0) + us
        intervals.append((e.time_range.start, e.time_range.end))
    intervals.sort()
    busy, cur_s, cur_e = 0.0, None, None
    for s, e in intervals:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        busy += cur_e - cur_s
    span = (intervals[-1][1] - intervals[0][0]) if intervals else 0.0
    return by_class, names, busy, span, len(kernels)


def run_case(name, layers, h, ffn, heads, seq, vocab, tp, mbs, micro_batches, args, llama=False):
    torch.manual_seed(0)
    m = Shard(layers, h, ffn, heads, seq, vocab, tp, mbs, llama)

    def iteration():
        for _ in range(micro_batches):
            m.micro_batch()

    ms_iter = steady_time(iteration, args.warm_seconds, args.iters)
    ms_mb = ms_iter / micro_batches
    ms_head = steady_time(m.head, 1.0, 10)
    tf = m.model_flops() / (ms_mb * 1e-3) / 1e12
    mem = torch.cuda.max_memory_allocated() / 2**30
    print(f"case {name}: layers={layers} h={h} ffn={ffn} heads={heads} seq={seq} vocab={vocab} tp={tp} "
          f"mbs={mbs} micro_batches={micro_batches}: {ms_mb:.3f} ms per micro-batch, {ms_iter:.3f} ms per "
          f"{micro_batches}, {tf:.1f} model TFLOP/s; head (final norm, output layer, cross entropy) "
          f"{ms_head:.3f} ms; peak {mem:.1f} GiB; wgrad_fp32={WGRAD_FP32}; attention_dropout={ATTENTION_DROPOUT}",
          flush=True)
    by_class, names, busy, span, count = breakdown(m.micro_batch)
    total = sum(by_class.values())
    print(f"  profile of one micro-batch: {count} kernels, {total / 1e3:.3f} ms kernel time, GPU busy "
          f"{busy / 1e3:.3f} of {span / 1e3:.3f} ms (idle {(span - busy) / 1e3:.3f} ms)", flush=True)
    for c, us in sorted(by_class.items(), key=lambda kv: -kv[1]):
        top = sorted(names[c].items(), key=lambda kv: -kv[1])[:4]
        print(f"  {c:12s} {us / 1e3:9.3f} ms  " + "; ".join(f"{n} {u / 1e3:.2f}" for n, u in top), flush=True)
    del m
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


CASES = [
    # e2e_iterations.csv row 10 (line 11): 1.7B GPT, TP 1, 4 micro-batches of 1 per DP rank
    ("readme-row10-tp1", 24, 2048, 8192, 16, 4096, 131072, 1, 1, 4),
    # row 13 (line 14): the TP 8 shard of the 30B GPT, 4 micro-batches of 1
    ("readme-row13-tp8", 48, 7168, 28672, 56, 4096, 131072, 8, 1, 4),
    # row 11 (line 12): the TP 2 shard of the 7B GPT, 4 micro-batches of 1
    ("readme-row11-tp2", 30, 4096, 16384, 32, 4096, 131072, 2, 1, 4),
    # row 10 with one micro-batch of 4 (the README does not state the micro-batch size)
    ("readme-row10-tp1-mbs4", 24, 2048, 8192, 16, 4096, 131072, 1, 4, 1),
    # e2e_more.csv row 10 (NeMo 24.03 Llama2-7B at 16K, TP 2) in BF16: the TP 2 shard, 1 micro-batch
    ("llama2-7b-16k-tp2-bf16", 32, 4096, 11008, 32, 16384, 32000, 2, 1, 1, True),
]

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--warm-seconds", type=float, default=4.0)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--cases", default="")
    ap.add_argument("--attention-dropout", type=float, default=0.0)
    args = ap.parse_args()
    ATTENTION_DROPOUT = args.attention_dropout
    print(f"torch {torch.__version__} cudnn {torch.backends.cudnn.version()} {torch.cuda.get_device_name()}", flush=True)
    for c in CASES:
        if args.cases and c[0] not in args.cases.split(","):
            continue
        try:
            run_case(*c[:10], args, *c[10:])
        except Exception as e:
            print(f"case {c[0]}: failed {type(e).__name__}: {e}", flush=True)
            torch.cuda.empty_cache()
