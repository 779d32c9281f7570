"""The SM clock a kernel really runs at, burst and sustained (issue 10).

A one-warp probe kernel on its own stream reads the SM cycle counter (clock64) and the global
nanosecond timer every WINDOW_NS while the kernel under test runs beside it on another stream;
cycles per nanosecond is the clock. Each case: 300 ms idle, then the probe, then the kernel
once (burst), 300 ms idle, then the kernel back to back for SUSTAIN_S seconds with the probe
running through it (sustained). Prints per case the median clock during the burst call and
during the last second of the sustained run, and the kernel's own time in both.
Needs torch and cupy (both in the device image). Usage: python3 clock_probe.py > clocks.txt
"""
import statistics
import time

import cupy
import torch
import torch.nn.functional as F

WINDOW_NS = 100_000
SUSTAIN_S = 4.0
PROBE = cupy.RawKernel(r'''
extern "C" __global__ void probe(unsigned long long* out, int samples, long long window) {
    if (threadIdx.x != 0) return;
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (int i = 0; i < samples; ++i) {
        do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < (unsigned long long)(i * window));
        out[2 * i] = t;
        out[2 * i + 1] = clock64();
    }
}
''', 'probe')
STAMP = cupy.RawKernel(r'''
extern "C" __global__ void stamp(unsigned long long* out) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    out[0] = t;
}
''', 'stamp')

dev = torch.device("cuda")
probe_stream = torch.cuda.Stream()
work_stream = torch.cuda.Stream()


def clocks(buf, samples):
    """(absolute time_ns, MHz) per window."""
    a = buf.get().reshape(samples, 2).astype('int64')
    out = []
    for i in range(1, samples):
        dt, dc = a[i, 0] - a[i - 1, 0], a[i, 1] - a[i - 1, 1]
        if dt > 0:
            out.append((int(a[i, 0]), dc / dt * 1000.0))
    return out


def stamp(buf):
    with cupy.cuda.ExternalStream(work_stream.cuda_stream):
        STAMP((1,), (1,), (buf,))


def run_probe(seconds):
    samples = int(seconds * 1e9 / WINDOW_NS) + 1
    buf = cupy.zeros(2 * samples, dtype=cupy.uint64)
    with cupy.cuda.ExternalStream(probe_stream.cuda_stream):
        PROBE((1,), (32,), (buf, cupy.int32(samples), cupy.int64(WINDOW_NS)))
    return buf, samples


def case(name, fn):
    # Untimed first calls (library initialisation, autotuning), then idle.
    for _ in range(3):
        fn()
    # Burst: after idle, one call with the probe beside it.
    torch.cuda.synchronize(); time.sleep(0.3)
    buf, samples = run_probe(0.02)
    time.sleep(0.001)
    marks = cupy.zeros(2, dtype=cupy.uint64)
    with torch.cuda.stream(work_stream):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        stamp(marks[0:1]); s.record(); fn(); e.record(); stamp(marks[1:2])
    torch.cuda.synchronize()
    burst_ms = s.elapsed_time(e)
    trace = clocks(buf, samples)
    start, stop = (int(v) for v in marks.get())
    during = [mhz for t, mhz in trace if start < t <= stop]
    idle = [mhz for t, mhz in trace if t < start]
    # Sustained: back to back for SUSTAIN_S with the probe through it.
    torch.cuda.synchronize(); time.sleep(0.3)
    buf, samples = run_probe(SUSTAIN_S + 0.2)
    time.sleep(0.001)
    n = 0
    t0 = time.perf_counter()
    last = []
    with torch.cuda.stream(work_stream):
        while time.perf_counter() - t0 < SUSTAIN_S:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); fn(); e.record(); n += 1
            last.append((s, e))
            if len(last) > 64:
                last.pop(0)
            if n % 16 == 0:
                e.synchronize()
    torch.cuda.synchronize()
    steady_ms = statistics.median(s.elapsed_time(e) for s, e in last[-32:])
    trace = clocks(buf, samples)
    first = trace[0][0] if trace else 0
    trace = [(t - first, mhz) for t, mhz in trace]
    end = SUSTAIN_S * 1e9
    tail = [mhz for t, mhz in trace if end - 1.0e9 <= t <= end]
    med = lambda xs: statistics.median(xs) if xs else float('nan')
    print(f"{name}: idle-probe {med(idle):.0f} MHz; burst call {burst_ms*1000:.1f} us at "
          f"{med(during):.0f} MHz (min {min(during, default=float('nan')):.0f}, max {max(during, default=float('nan')):.0f}, "
          f"{len(during)} windows); sustained {n} calls, last 32 median {steady_ms*1000:.1f} us "
          f"at {med(tail):.0f} MHz (last second); steady/burst time {steady_ms/burst_ms:.3f}", flush=True)
    # The sustained clock over time, every 0.25 s.
    marks = []
    for k in range(int(SUSTAIN_S * 4)):
        w = [mhz for t, mhz in trace if k * 0.25e9 <= t < (k + 1) * 0.25e9]
        marks.append(f"{med(w):.0f}")
    print(f"  {name} sustained clock every 0.25 s: {' '.join(marks)}", flush=True)


bf = torch.bfloat16
a = torch.randn(8192, 8192, device=dev, dtype=bf); b = torch.randn(8192, 8192, device=dev, dtype=bf)
f8 = torch.float8_e4m3fn
one = torch.ones((), device=dev)
a8 = torch.randn(8192, 8192, device=dev).to(f8); b8 = torch.randn(8192, 8192, device=dev).to(f8).t()
q = torch.randn(1, 16, 8192, 128, device=dev, dtype=bf); k = torch.randn_like(q); v = torch.randn_like(q)
x = torch.empty(512 * 2**20, device=dev, dtype=torch.uint8); y = torch.empty_like(x)
a4 = torch.randn(4096, 4096, device=dev, dtype=bf)
from torch.nn.attention import SDPBackend, sdpa_kernel
def attn():
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
print(torch.__version__, torch.cuda.get_device_name(), flush=True)
case("bf16 gemm 8192^3", lambda: torch.mm(a, b))
case("bf16 gemm 4096^3", lambda: torch.mm(a4, a4))
case("fp8 gemm 8192^3", lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=bf))
case("cudnn attention causal 1x16x8192x128 fwd", attn)
case("copy 512 MiB", lambda: y.copy_(x))
