"""One short GPU check (< 10 min on one H100): train step with each switch on and off next to
PyTorch, JAX decode against its bandwidth floor, the cuDNN attention test; one dated table.

    XLA_PYTHON_CLIENT_PREALLOCATE=false python scripts/bench/gpu_check.py \
        --out docs/gpu_check_$(date -u +%F).md                       # on a machine with a GPU
    python scripts/bench/gpu_check.py --dry-run --out /tmp/check.md  # CPU, toy sizes, ~1 min

Every number comes from the existing benchmarks, imported and called as they are run by hand:
`bench_train_step.main` (one row per model x switch; `torch` rows add the same step in
PyTorch/transformers and its ratio) and `bench_samplers.main --decode`; the cuDNN-vs-XLA
attention test is `pytest tests/models/test_attention_kernels.py`. The switches A/B'd (each
off by default in the library; `switches()` below):

    vocab_block   LossConfig.logprob_vocab_block: 0 (whole vocabulary) | 16384 (rl.vocab_blocks)
    fused         ModelConfig.fused_norm + fused_mlp + fused_rope (RMSNorm's hand-written
                  backward, SwiGLU's gate/up as one matmul, rope's cos/sin once per forward)
    lengths       ModelConfig.padding_as_lengths (cuDNN attention with per-row lengths, no
                  [B, 1, T, T] mask bias)
    all           the three above together
    decode_block  JaxSampler(decode_block=64): decode attends over the filled cache prefix only
    decode sum    ModelConfig.decode_attention "sum" (on a GPU "auto" is "dot", the batched
                  products; "sum" is the CPU's choice: products summed in one fused loop)

The benchmarks have flags for the vocabulary block only; the model and sampler switches are
set on the config / sampler they build (`_switched`), in this process.

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
import dataclasses
import datetime
import functools
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


@dataclasses.dataclass(frozen=True)
class Switch:
    """One setting of the switches A/B'd: what it sets, and its name in the table."""

    name: str
    vocab_block: int = 0  # LossConfig.logprob_vocab_block (bench_train_step --vocab-block)
    model: tuple[tuple[str, bool | str], ...] = ()  # ModelConfig fields
    decode_block: int = 0  # JaxSampler(decode_block=...)


_FUSED = (("fused_norm", True), ("fused_mlp", True), ("fused_rope", True))
_LENGTHS = (("padding_as_lengths", True),)


def switches(dry_run: bool) -> dict[str, Switch]:
    """The settings by name; the vocabulary block and decode block at the run's sizes."""
    vocab, decode = (128, 2) if dry_run else (16384, 64)  # tiny vocabulary: 512 columns
    return {
        s.name: s
        for s in (
            Switch("baseline"),
            Switch(f"vocab_block {vocab}", vocab_block=vocab),
            Switch("fused", model=_FUSED),
            Switch("lengths", model=_LENGTHS),
            Switch("all", vocab_block=vocab, model=_FUSED + _LENGTHS),
            Switch(f"decode_block {decode}", decode_block=decode),
            Switch("decode sum", model=(("decode_attention", "sum"),)),
        )
    }


# (label, bench_train_step arguments, with the PyTorch twin, the switch settings run). Steps at
# 4096 tokens per row: the configurations of docs/benchmarks.md ("On one GPU") that reached
# 27.4% / 30.1% MFU. Each switch alone on the 0.5B step without the twin; all of them against
# the baseline on the 1.5B step (the 40% MFU target) with the twin.
_QWEN05 = "--preset qwen2.5-0.5b --dtype bfloat16 --remat --batch 8 --prompt-len 1024 "
_QWEN05 += "--response-len 3072 --no-kl --steps 3"
_QWEN15 = _QWEN05.replace("qwen2.5-0.5b", "qwen2.5-1.5b")
_EACH = ("baseline", "vocab_block 16384", "fused", "lengths", "all")
GPU_TRAIN = [
    ("Qwen2.5-0.5B mb 8", f"{_QWEN05} --micro-batch 8", False, _EACH),
    ("Qwen2.5-0.5B mb 2", f"{_QWEN05} --micro-batch 2", True, ("baseline",)),
    ("Qwen2.5-1.5B mb 2", f"{_QWEN15} --micro-batch 2", True, ("baseline", "all")),
]
# Qwen3 (head size 128, per-head q/k norms): run after the decode and cuDNN items, so that it
# is the item the time budget drops first.
GPU_TRAIN_LAST = [
    (
        "Qwen3-0.6B mb 2",
        _QWEN05.replace("qwen2.5-0.5b", "qwen3-0.6b") + " --micro-batch 2",
        True,
        ("baseline", "all"),
    )
]
GPU_DECODE = "--preset qwen2.5-0.5b --dtype bfloat16 --backends jax --decode --prompts 64 --n 4 "
GPU_DECODE += "--prompt-len 256 --max-tokens 512"
GPU_DECODE_SWITCHES = ("baseline", "decode_block 64", "decode sum")

_TINY = "--preset tiny-qwen2 --batch 4 --prompt-len 8 --response-len 24 --no-kl --steps 1"
DRY_TRAIN = [
    (
        "tiny-qwen2 mb 2",
        f"{_TINY} --micro-batch 2",
        True,
        ("baseline", "vocab_block 128", "fused", "lengths", "all"),
    )
]
DRY_DECODE = "--preset tiny-qwen2 --backends jax --decode --prompts 2 --n 2 --prompt-len 8 "
# 64 tokens: with fewer, the tiny model's decode took no longer than the call's overhead
# (16 tokens: 0.033 s against a 0.034 s prefill beside another test worker; bench_samplers
# refuses that as noise)
DRY_DECODE += "--max-tokens 64 --copy-gib 0.0625"  # the 1 GiB bf16 copy: ~20 s on a CPU
DRY_DECODE_SWITCHES = ("baseline", "decode_block 2", "decode sum")


@contextlib.contextmanager
def _switched(switch: Switch):
    """Sets the switch's ModelConfig fields on the configs bench_train_step and bench_samplers
    build, and its decode block on the JaxSampler bench_samplers builds (none has a flag)."""
    model_config, sampler = bench_train_step.model_config, bench_samplers.JaxSampler
    preset_config = bench_samplers.preset_config
    fields = dict(switch.model)
    bench_train_step.model_config = lambda args: model_config(args).replace(**fields)
    bench_samplers.preset_config = lambda *a: preset_config(*a).replace(**fields)
    bench_samplers.JaxSampler = functools.partial(sampler, decode_block=switch.decode_block)
    try:
        yield
    finally:
        bench_train_step.model_config, bench_samplers.JaxSampler = model_config, sampler
        bench_samplers.preset_config = preset_config


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


def train_item(label: str, args: str, torch: bool, switch: Switch, peak: float) -> dict:
    argv = [*args.split(), "--vocab-block", str(switch.vocab_block), "--peak-tflops", str(peak)]
    if torch:
        argv += ["--against-torch", "--entropy-coef", "0"]
    with _switched(switch):
        out = _json_of(bench_train_step.main, argv)
    row = {"item": f"train {label}, {switch.name}"}
    row |= {k: out[k] for k in ("step_s", "tokens_per_s", "mfu", "compile_s", "length")}
    if torch:
        row |= {k: out[k] for k in ("torch_step_s", "ratio", "first_step", "torch_device")}
    return row


def decode_item(args: str, switch: Switch) -> dict:
    """The floor counts the whole cache (bench_samplers): with a decode block the step reads
    less than that, so compare step_ms between the rows."""
    with _switched(switch):
        out = _json_of(bench_samplers.main, args.split())
    d = out["jax_decode"]
    keys = ("decode_tokens_per_s", "step_ms", "floor_step_ms", "bandwidth_fraction")
    keys += ("rows", "decode_steps", "decode_s", "param_gb", "kv_cache_gb")
    row = {"item": f"decode (JAX sampler), {switch.name}"} | {k: d[k] for k in keys}
    return row | {"generated_tokens": out["jax"]["generated_tokens"]}


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
    by_name = switches(dry_run)
    train, decode, decode_switches = (
        (DRY_TRAIN, DRY_DECODE, DRY_DECODE_SWITCHES)
        if dry_run
        else (GPU_TRAIN, GPU_DECODE, GPU_DECODE_SWITCHES)
    )

    def train_items(rows):
        for label, args, torch, names in rows:
            for name in names:
                thunk = functools.partial(train_item, label, args, torch, by_name[name], peak)
                yield f"train {label}, {name}", thunk

    out = list(train_items(train))
    for name in decode_switches:
        thunk = functools.partial(decode_item, decode, by_name[name])
        out.append((f"decode (JAX sampler), {name}", thunk))
    out.append(("cuDNN attention test", cudnn_item))
    out += list(train_items([] if dry_run else GPU_TRAIN_LAST))
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
