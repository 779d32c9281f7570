"""What the issue-17 device scripts share: CUDA-event timing, one CSV row per timed case, and
the error line a failed run leaves on stderr. Imported from the scripts beside it (they run as
`python3 tools/device/NAME.py`, so this folder is on the path)."""

import sys

import torch


def timed_us(fn, repeats=10, warmup=3):
    """Mean GPU time of `fn` in microseconds over `repeats` back-to-back calls (CUDA events)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / repeats


def report(prefix, what, flops, fn):
    """Times `fn` and prints `prefix,"what",us,tflops`, or the failure in the `what` field."""
    quoted = '"' + what.replace('"', "'")  # a quoted CSV field: descriptions hold commas
    try:
        us = timed_us(fn)
        print(f'{prefix},{quoted}",{us:.2f},{flops / us / 1e6:.1f}', flush=True)
    except Exception as e:
        failure = f"{type(e).__name__}: {str(e)[:100]}".replace("\n", " ").replace('"', "'")
        print(f'{prefix},{quoted} failed: {failure}",,', flush=True)


def run(main):
    """Runs `main`, leaving one error line on stderr before the traceback if it fails."""
    try:
        main()
    except Exception as e:
        print(f"error,{type(e).__name__}: {e}".replace("\n", " "), file=sys.stderr)
        raise
