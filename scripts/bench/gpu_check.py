"""One short GPU check (< 10 min on one H100): train step with each switch on and off next to
PyTorch, JAX decode against its bandwidth floor, the cuDNN attention test; one dated table.

    XLA_PYTHON_CLIENT_PREALLOCATE=false python scripts/bench/gpu_check.py \
        --out docs/gpu_check_$(date -u +%F).md                       # on a machine with a GPU
    python scripts/bench/gpu_check.py --dry-run --out /tmp/check.md  # CPU, toy sizes, ~1 min

Every number comes from the existing benchmarks, imported and called as they are run by hand:
`bench_train_step.main` (one row per model x switch; `torch` rows add the same step in
PyTorch/transformers and its ratio) and `bench_samplers.main --decode`; the cuDNN-vs-XLA
attention test is `pytest tests/models/test_attention_kernels.py`. The switches A/B'd:

    vocab_block   LossConfig.logprob_vocab_block: 0 (whole vocabulary) | 16384 (rl.vocab_blocks)

The table (Markdown, and JSON beside it) starts with the device, driver, library versions and
the UTC date. Items run in order until `--budget-s` is spent; the rest are listed as skipped,
so a GPU lease never ends with nothing written. An item that raises is recorded with its error
(one line) and the script exits 1 after writing the table.

--dry-run runs the same items at toy sizes on whatever backend JAX has (the suite runs it on
the CPU, tests/scripts/test_gpu_check.py): its numbers are not measurements.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import bench_samplers
import bench_train_step
import jax

ROOT = Path(__file__).resolve().parents[2]
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}  # dense, per GPU

# (label, bench_train_step arguments, with the PyTorch twin). Steps at 4096 tokens per row:
# the configurations of docs/benchmarks.md ("On one GPU") that reached 27.4% / 30.1% MFU.
_QWEN05 = "--preset qwen2.5-0.5b --dtype bfloat16 --remat --batch 8 --prompt-len 1024 "
_QWEN05 += "--response-len 3072 --no-kl --steps 3"
_QWEN15 = _QWEN05.replace("qwen2.5-0.5b", "qwen2.5-1.5b")
GPU_TRAIN = [
    ("Qwen2.5-0.5B mb 8", f"{_QWEN05} --micro-batch 8", False),
    ("Qwen2.5-0.5B mb 2", f"{_QWEN05} --micro-batch 2", True),
    ("Qwen2.5-1.5B mb 2", f"{_QWEN15} --micro-batch 2", True),
]
# Qwen3 (head size 128, per-head q/k norms): run after the decode and cuDNN items, one vocab
# setting, so that it is the item the time budget drops first.
GPU_TRAIN_LAST = [
    ("Qwen3-0.6B mb 2", _QWEN05.replace("qwen2.5-0.5b", "qwen3-0.6b") + " --micro-batch 2", True)
]
GPU_VOCAB_BLOCKS = (0, 16384)
GPU_DECODE = "--preset qwen2.5-0.5b --dtype bfloat16 --backends jax --decode --prompts 64 --n 4 "
GPU_DECODE += "--prompt-len 256 --max-tokens 512"

_TINY = "--preset tiny-qwen2 --batch 4 --prompt-len 8 --response-len 24 --no-kl --steps 1"
DRY_TRAIN = [("tiny-qwen2 mb 2", f"{_TINY} --micro-batch 2", True)]
DRY_VOCAB_BLOCKS = (0, 128)  # tiny vocabulary: 512 columns, 4 blocks
DRY_DECODE = "--preset tiny-qwen2 --backends jax --decode --prompts 2 --n 2 --prompt-len 8 "
DRY_DECODE += "--max-tokens 8"


def _json_of(main, argv: list[str]) -> dict:
    """Runs a benchmark's `main(argv)` in this process; returns the JSON line it prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(argv)
    if rc:
        raise RuntimeError(f"{main.__module__}.main returned {rc}")
    return json.loads(out.getvalue().strip().splitlines()[-1])


def environment() -> dict:
    """Device, driver, versions and the UTC date: the table's header."""
    import flax

    env = {
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M"),
        "device": str(jax.devices()[0].device_kind),
        "backend": jax.default_backend(),
        "jax": jax.__version__,
        "flax": flax.__version__,
        "driver": "none",
    }
    with contextlib.suppress(ImportError):
        import torch

        env["torch"] = torch.__version__
    if jax.default_backend() == "gpu" and shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        env["driver"] = subprocess.run(query, capture_output=True, text=True).stdout.strip()
    return env


def peak_tflops(device: str, dry_run: bool) -> float:
    if dry_run:
        return 1.0  # exercises the MFU code path; a toy model's MFU means nothing
    for name, peak in PEAK_BF16_TFLOPS.items():
        if name in device:
            return peak
    raise SystemExit(
        f"gpu_check: no bf16 peak known for device {device!r}; add it to PEAK_BF16_TFLOPS."
    )


def train_item(label: str, args: str, torch: bool, block: int, peak: float) -> dict:
    argv = [*args.split(), "--vocab-block", str(block), "--peak-tflops", str(peak)]
    if torch:
        argv += ["--against-torch", "--entropy-coef", "0"]
    out = _json_of(bench_train_step.main, argv)
    row = {"item": f"train {label}, vocab_block {block}"}
    row |= {k: out[k] for k in ("step_s", "tokens_per_s", "mfu", "compile_s")}
    if torch:
        row |= {k: out[k] for k in ("torch_step_s", "ratio", "first_step")}
    return row


def decode_item(args: str) -> dict:
    out = _json_of(bench_samplers.main, args.split())
    d = out["jax_decode"]
    keys = ("decode_tokens_per_s", "step_ms", "floor_step_ms", "bandwidth_fraction")
    return {"item": "decode (JAX sampler)"} | {k: d[k] for k in keys}


def cudnn_item() -> dict:
    """The attention-kernel tests (cuDNN against the XLA einsums on a GPU; skipped on CPUs)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    cmd += ["tests/models/test_attention_kernels.py", "-k", "cudnn"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    summary = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    if proc.returncode:
        raise RuntimeError(f"pytest exit {proc.returncode}: {summary}")
    return {"item": "cuDNN attention test", "result": summary.strip("= ")}


def items(dry_run: bool, peak: float):
    """(name, thunk) in the order they run."""
    train, blocks, decode = (
        (DRY_TRAIN, DRY_VOCAB_BLOCKS, DRY_DECODE)
        if dry_run
        else (GPU_TRAIN, GPU_VOCAB_BLOCKS, GPU_DECODE)
    )
    out = []
    for label, args, torch in train:
        for block in blocks:
            name = f"train {label}, vocab_block {block}"
            out.append((name, lambda a=(label, args, torch, block): train_item(*a, peak)))
    out.append(("decode (JAX sampler)", lambda: decode_item(decode)))
    out.append(("cuDNN attention test", cudnn_item))
    for label, args, torch in [] if dry_run else GPU_TRAIN_LAST:
        name = f"train {label}, vocab_block 0"
        out.append((name, lambda a=(label, args, torch, 0): train_item(*a, peak)))
    return out


def markdown(env: dict, rows: list[dict], dry_run: bool) -> str:
    head = ", ".join(f"{k} {v}" for k, v in env.items())
    lines = [f"# gpu_check{' (dry run: toy sizes, not measurements)' if dry_run else ''}", ""]
    lines += [head, "", "| item | numbers |", "|---|---|"]
    for r in rows:
        nums = "; ".join(f"{k} {json.dumps(v)}" for k, v in r.items() if k != "item")
        lines.append(f"| {r['item']} | {nums} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dry-run", action="store_true", help="toy sizes on any backend (the suite)")
    p.add_argument("--out", required=True, help="the Markdown table (JSON beside it: .json)")
    p.add_argument("--budget-s", type=float, default=540.0, help="stop starting items after this")
    args = p.parse_args(argv)
    if not args.dry_run and jax.default_backend() != "gpu":
        p.error(
            f"JAX's backend is {jax.default_backend()!r}, not 'gpu': run on a GPU machine "
            "(scripts/setup.sh gpu), or add --dry-run for the CPU check of the code paths."
        )
    env = environment()
    peak = peak_tflops(env["device"], args.dry_run)
    start, rows, failed = time.perf_counter(), [], False
    for name, thunk in items(args.dry_run, peak):
        if time.perf_counter() - start > args.budget_s:
            rows.append({"item": name, "skipped": f"time budget ({args.budget_s:.0f} s) spent"})
            continue
        t0 = time.perf_counter()
        try:
            row = thunk()
        except Exception as e:  # recorded in the table; the exit status says it failed
            row, failed = {"item": name, "error": f"{type(e).__name__}: {e}"[:300]}, True
        row["seconds"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    out = Path(args.out)
    out.write_text(markdown(env, rows, args.dry_run))
    out.with_suffix(".json").write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
    print(out.read_text())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
