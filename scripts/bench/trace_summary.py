"""Where a profiled step's device time goes: the kernels of a `jax.profiler` Perfetto trace,
summed by name and by category.

    python scripts/bench/bench_train_step.py ... --profile /tmp/prof
    python scripts/bench/trace_summary.py /tmp/prof [--top 30]

Reads the newest `perfetto_trace.json.gz` under the directory, keeps the complete events
("ph": "X") of device threads (GPU streams: process names containing "/device:"), and prints
the total device time, then the top kernels and a rough category split (matmul, attention,
reduction / softmax, elementwise fusion, copy / transpose, collective, other) by kernel name.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
import sys
from pathlib import Path

CATEGORIES = (  # first match wins
    ("attention (cuDNN)", re.compile(r"cudnn|fmha|flash|sdpa", re.I)),
    ("matmul", re.compile(r"gemm|cublas|nvjet|matmul|dot|wgmma|sm90_xmma|cutlass", re.I)),
    ("reduction / softmax", re.compile(r"reduce|softmax|logsumexp", re.I)),
    ("copy / transpose", re.compile(r"copy|transpose|memcpy|memset|dynamic.update|slice", re.I)),
    ("collective", re.compile(r"nccl|all.?reduce|all.?gather|reduce.?scatter", re.I)),
    ("elementwise fusion", re.compile(r"fusion|loop|input_", re.I)),
)


def load_events(trace_dir: Path) -> tuple[list[dict], dict[int, str]]:
    files = sorted(trace_dir.rglob("perfetto_trace.json.gz"), key=lambda f: f.stat().st_mtime)
    if not files:
        raise SystemExit(f"{trace_dir}: no perfetto_trace.json.gz (run with --profile DIR).")
    with gzip.open(files[-1], "rt") as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    names = {
        e["pid"]: e.get("args", {}).get("name", "")
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    return events, names


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("trace_dir", type=Path)
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args(argv)
    events, names = load_events(args.trace_dir)
    device_pids = {pid for pid, name in names.items() if "/device:" in name}
    by_name: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for e in events:
        if e.get("ph") == "X" and e.get("pid") in device_pids and "dur" in e:
            by_name[e["name"]] += e["dur"]
            count[e["name"]] += 1
    total = sum(by_name.values())
    if not total:
        raise SystemExit(
            f"no device events in {args.trace_dir} (processes: {sorted(names.values())})"
        )
    print(f"device time {total / 1e3:.1f} ms in {sum(count.values())} kernel launches")
    cats: collections.Counter[str] = collections.Counter()
    for name, us in by_name.items():
        cats[next((c for c, rx in CATEGORIES if rx.search(name)), "other")] += us
    for cat, us in cats.most_common():
        print(f"  {cat:<22} {us / 1e3:9.1f} ms  {100 * us / total:5.1f}%")
    print(f"top {args.top} kernels:")
    for name, us in by_name.most_common(args.top):
        print(f"  {us / 1e3:9.2f} ms {100 * us / total:5.1f}% x{count[name]:<5} {name[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
