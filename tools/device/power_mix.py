"""Sustained SM clock and board power per kernel class, and for mixes of them: the data a
power-capped clock model needs (the clock a mix holds when its average power meets the cap).

Each phase runs one kind of work back to back for `--seconds` (after 1 s idle), while
nvidia-smi samples clock and power every 100 ms; the last 60% of each phase is summarised
(median clock, median power, throttle reasons seen) beside the work's rate.

Usage: python3 power_mix.py [--seconds 5] > out.txt
"""
import argparse, statistics, subprocess, time
from datetime import datetime
import torch
import torch.nn.functional as F

dev = torch.device("cuda")
bf16 = torch.bfloat16


def gemm(m, n, k):
    a = torch.randn(m, k, device=dev, dtype=bf16)
    b = torch.randn(k, n, device=dev, dtype=bf16)

    def run():
        torch.mm(a, b)

    return run, 2 * m * n * k, "TFLOP/s"


def attention(b, h, s, d):
    q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=bf16, requires_grad=True) for _ in range(3))
    g = torch.randn(b, h, s, d, device=dev, dtype=bf16)

    def run():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o.backward(g)

    # Model FLOPs of forward + backward, causal counted full (Megatron's count).
    return run, 3 * 4 * b * h * s * s * d, "TFLOP/s"


def gemm_fp8(m, n, k):
    a = torch.randn(m, k, device=dev, dtype=bf16).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device=dev, dtype=bf16).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=dev, dtype=torch.float32)

    def run():
        torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=bf16)

    return run, 2 * m * n * k, "TFLOP/s"


def elementwise(gib):
    x = torch.randn(int(gib * 2**30 / 2), device=dev, dtype=bf16)
    y = torch.empty_like(x)

    def run():
        torch.mul(x, 1.0001, out=y)

    return run, 2 * x.numel() * 2, "GB/s"


def mix(parts):
    """Runs each part once per call, in turn."""
    runs = [p[0] for p in parts]

    def run():
        for r in runs:
            r()

    return run, None, ""


def phase(name, work, seconds, marks):
    run, amount, unit = work
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    time.sleep(1.0)
    t0 = time.time()
    n = 0
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    timed_from = t0 + 0.4 * seconds
    started = False
    while time.time() - t0 < seconds:
        if not started and time.time() >= timed_from:
            torch.cuda.synchronize()
            st.record()
            n = 0
            started = True
        run()
        n += 1
        if n % 8 == 0:
            torch.cuda.synchronize()
    en.record()
    torch.cuda.synchronize()
    t1 = time.time()
    ms = st.elapsed_time(en) / max(n, 1)
    rate = f"{amount / (ms * 1e-3) / (1e12 if unit == 'TFLOP/s' else 1e9):.1f} {unit}" if amount else ""
    marks.append((name, timed_from, t1, ms, rate))
    print(f"phase {name}: {ms:.3f} ms per call {rate}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--samples", default="", help="file for nvidia-smi's raw samples")
    ap.add_argument("--more", action="store_true",
                    help="also fp8 8192^3 and mixes of the 8192^3 GEMM with elementwise work")
    args = ap.parse_args()
    smi = subprocess.Popen(
        ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active",
         "--format=csv,noheader,nounits", "-lms", "100"],
        stdout=subprocess.PIPE, text=True)
    print(f"torch {torch.__version__} cudnn {torch.backends.cudnn.version()} {torch.cuda.get_device_name()}", flush=True)
    marks = []
    g_row10 = gemm(4096, 8192, 2048)
    g_big = gemm(8192, 8192, 8192)
    att = attention(1, 16, 4096, 128)
    ew = elementwise(1.0)
    works = [
        ("gemm-8192^3", g_big),
        ("gemm-4096x8192x2048", g_row10),
        ("attention-cudnn-1x16x4096x128-fwd+bwd", att),
        ("elementwise-1GiB-bf16", ew),
        ("mix-gemm4096x8192x2048+elementwise", mix([g_row10, ew])),
        ("mix-gemm4096x8192x2048x3+attention+elementwise", mix([g_row10, g_row10, g_row10, att, ew])),
    ]
    if args.more:
        works += [
            ("gemm-fp8-8192^3", gemm_fp8(8192, 8192, 8192)),
            ("mix-gemm8192^3+elementwise", mix([g_big, ew])),
            ("mix-gemm8192^3+elementwise-x3", mix([g_big, ew, ew, ew])),
        ]
    for name, w in works:
        phase(name, w, args.seconds, marks)
    time.sleep(0.5)
    smi.terminate()
    out, _ = smi.communicate()
    samples = []
    for line in out.splitlines():
        f = [x.strip() for x in line.split(",")]
        try:
            t = datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            samples.append((t, float(f[1]), float(f[2]), f[3]))
        except (ValueError, IndexError):
            continue
    print("phase summary (median of the timed part): clock MHz, power W, throttle reasons", flush=True)
    for name, a, b, ms, rate in marks:
        inside = [s for s in samples if a <= s[0] <= b]
        if not inside:
            print(f"  {name}: no samples (clock offset?)", flush=True)
            continue
        clocks = [s[1] for s in inside]
        power = [s[2] for s in inside]
        reasons = sorted({s[3] for s in inside})
        print(f"  {name}: {statistics.median(clocks):.0f} MHz ({min(clocks):.0f}-{max(clocks):.0f}), "
              f"{statistics.median(power):.0f} W, {len(inside)} samples, reasons {reasons}; "
              f"{ms:.3f} ms per call {rate}", flush=True)
    if args.samples:
        with open(args.samples, "w") as f:
            f.write(out)


if __name__ == "__main__":
    main()
