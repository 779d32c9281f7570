#!/usr/bin/env python3
"""Where the validation error sits: every row of every `runs/validate-*/validation.csv`
(run `fleetsim validate configs/validation/<t>.csv --set network.model=analytical` first),
split by GPU, dense or MoE, dispatcher and whether the table is held out.

The error is signed as speed: +10% means fleetsim is 10% too fast (predicted step time
short, or predicted TFLOP/s high), whatever the table's unit.

    tools/validation-split.py [RUNS_DIR]        (default: runs)
"""

import collections
import csv
import glob
import os
import re
import statistics
import sys

# Tables nothing was fitted to (docs/validation.md, "The tables").
HELD_OUT = {
    "grok1_314b",
    "nemo2407_h100",
    "mcore_dsv3_gb200",
    "bridge_qwen3",
    "bridge_summary",
    "bridge_more",
    "bridge_2604",
}


def key(text, name):
    m = re.search(r"^" + name + r"\s*=\s*(.+)$", text, re.M)
    return m.group(1).strip().strip('"') if m else "-"


def dispatcher(text):
    """The MoE token dispatcher a case names; Megatron-Core's default, alltoall, if none."""
    name = key(text, "moe_token_dispatcher")
    return "alltoall" if name == "-" else name


def rows(runs):
    for path in sorted(glob.glob(os.path.join(runs, "validate-*", "validation.csv"))):
        table = os.path.basename(os.path.dirname(path))[len("validate-") :]
        for r in csv.DictReader(open(path)):
            if r["failure"]:
                continue
            case = os.path.join(os.path.dirname(path), "cases", os.path.basename(r["case"]))
            with open(case) as f:
                text = f.read()
            named = key(text, "experts")
            experts = int(named) if named != "-" else 1
            measured, predicted = float(r["measured"]), float(r["predicted"])
            fast = measured / predicted - 1 if r["unit"] == "s_per_iter" else predicted / measured - 1
            yield {
                "table": table,
                "row": r["row"],
                "gpu": r["gpu"],
                "moe": experts > 1,
                "dispatcher": dispatcher(text) if experts > 1 else "",
                "held_out": table in HELD_OUT,
                "fast": 100 * fast,
            }


def summary(label, values):
    if not values:
        return
    mean = statistics.mean(values)
    abs_mean = statistics.mean(abs(v) for v in values)
    abs_median = statistics.median(abs(v) for v in values)
    print(f"{label:38s} n={len(values):3d}  mean {mean:+6.1f}%  |err| mean {abs_mean:5.1f}%  median {abs_median:5.1f}%")


def main():
    runs = sys.argv[1] if len(sys.argv) > 1 else "runs"
    all_rows = list(rows(runs))
    groups = collections.defaultdict(list)
    for r in all_rows:
        kind = "moe" if r["moe"] else "dense"
        groups[(r["gpu"], kind)].append(r["fast"])
        groups[("held out" if r["held_out"] else "fitted", kind)].append(r["fast"])
        if r["moe"]:
            groups[("dispatcher", r["dispatcher"])].append(r["fast"])
    for k in sorted(groups):
        summary(f"{k[0]} {k[1]}", groups[k])


if __name__ == "__main__":
    main()
