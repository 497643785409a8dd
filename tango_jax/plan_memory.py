"""Does a config's training fit its devices? XLA's per-device memory plan, before renting GPUs.

    python -m tango_jax.plan_memory --config configs/tango_qwen2_5_math_7b.py
    python -m tango_jax.plan_memory --config configs/tango_llama3_1_8b.py --devices 8
    python -m tango_jax.plan_memory --config configs/tango_qwen3_8b.py   # docs/models.md
    python -m tango_jax.plan_memory --config configs/tango_qwen2_5_math_7b.py:lora --devices 1 \\
        --config.generator.sampler.backend=jax --device_gb 80,94,141
    python -m tango_jax.plan_memory --config configs/tiny_arith.py --layers full

The command line is train's: the same config file, variant and `--config.a.b=value`
overrides, checked the same way, each mistake one line naming the fix (config/cli.py). The
table goes to stdout (and `--json_out`), progress to stderr; the last lines give, for each
device size asked about (`--device_gb`, default 80 and 141 GB), the steps that would keep
less than 10% of it free, or that all keep that much.

For each trained role (generator, verifier) it compiles the role's train step ahead of time
(`tango_jax/rl/memory_plan.py`: the Trainer's jit of `rl.train_step.train_step`, from abstract
arrays that carry their shardings; no weights are read or allocated) on the config's mesh over
`--devices` simulated CPU devices (`--xla_force_host_platform_device_count`), for the worst-case
batch of the config (prompts_per_step x rollout.n rows, prompts padded to max_prompt_len,
responses to rollout.max_tokens rounded up to response_bucket), and prints XLA's memory
analysis per device next to the device sizes asked about (an 80 GB A100/H100 and a 141 GB H200
unless `--device_gb` names others).

Both models live on the trainer's devices, so a role's step runs beside the other role's
resident parameters, optimizer state and reference model: the device total is the step's peak
plus that. Models come from the config's model.path (its config.json) when it exists, else from
the preset whose name the path's directory starts with (Qwen2.5-Math-7B-SFT -> qwen2.5-math-7b).

`--layers 4,8` (the default) compiles each step at 4 and 8 layers and extrapolates every number
linearly to the model's depth (compiling 28 unrolled 7B layers on a CPU takes far longer and
more memory than this machine has to spare); `--layers full` compiles the real depth. Not 2
layers: there the step's peak is in the log-prob head and the loss, not in the layer stack, so
a 2-layer plan lies off the per-layer line and a change that only lowered it (the 2-D token
matmuls: 13.9 -> 13.5 GB for the 7B generator) read as 14 GB more at 28 layers through the
steeper 2-to-4 slope (docs/benchmarks.md, "Memory plan").

Attention is planned as a GPU would run it: where cuDNN's flash attention fits (bf16/fp16, the
default "auto"), which a CPU cannot compile, through "xla_blocked" (64-query blocks of scores,
still above cuDNN's memory); a forced "xla", or float32, through the einsums over whole [T, T]
scores (`rl.memory_plan.gpu_attention_proxy`). Until 2026-11-26 every plan used the einsums:
7.5 GB of float32 scores per 8192-token row and layer that cuDNN never writes.

The CPU compiler's all-reduce combiner is left out (`--xla_disable_hlo_passes=
cpu-all-reduce-combiner`): it has no size limit and merges every layer's gradient reduction
into one all-reduce at the end of the backward pass, so its plan holds all layers' unsharded
float32 gradients at once (20 GB of the 7B generator's whole-depth plan); a GPU's combiner
stops at a threshold far below one 7B layer's gradients. `--cpu_combiner` keeps it, for the
plans recorded before 2026-11-27 (docs/scaling.md). Both settings, and the simulated devices,
reach XLA through XLA_FLAGS, set by the command before JAX loads (`_simulate_devices`).

A role whose sampler is the embedded JAX one (`<role>.sampler.backend=jax`) gets a second row,
"<role> sampling": its generate call at the largest (`sampler.max_rows` rows, or a step's if
fewer, prompts padded to the role's prompt budget, `rollout.max_tokens` new tokens), planned
the same way (`rollout.memory_plan.generate_memory`); its "batch" column is the KV cache (held in
its temporaries), and its "other_model_resident" counts the role's own optimizer state and
reference besides the other model, since the sampler runs between the steps beside them. With
`sampler.share_prefix` (the default) the peak also counts the distinct prompts' caches that the
shared prefill holds while it lays out the rows' cache (at most rows / `rollout.n` prompts, in
groups of `row_bucket`; per device an upper bound): the "shared_prefill" column.

Caveat: the plan is the CPU compiler's. GPU XLA fuses differently and assigns buffers
differently (and CPU may widen bf16 arithmetic to f32), so read the temporaries as an estimate
of the GPU's, not as its figure; the parameter, optimizer-state and batch bytes are exact.
JAX on a GPU also preallocates 75% of the memory unless XLA_PYTHON_CLIENT_MEM_FRACTION is set.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from absl import app, flags
from ml_collections import config_flags

from tango_jax.config import cli
from tango_jax.schema import ConfigError

if TYPE_CHECKING:
    from tango_jax.config.run import RunConfig
    from tango_jax.models.config import ModelConfig
    from tango_jax.rl.memory_plan import StepMemory
    from tango_jax.rollout.memory_plan import GenerateMemory

_CONFIG = config_flags.DEFINE_config_file("config", None, "configs/NAME.py[:VARIANT]")
# --devices and --cpu_combiner are read from the command line before absl parses it (they set
# XLA_FLAGS, which must come before JAX loads: `_simulate_devices`); defined here for absl.
_DEVICES = flags.DEFINE_integer("devices", 8, "simulated devices (the trainer's GPUs)")
_LAYERS = flags.DEFINE_string("layers", "4,8", "two depths to extrapolate from, or 'full'")
_DEVICE_GB = flags.DEFINE_list("device_gb", ["80", "141"], "device memory sizes, GB (1e9 B)")
_JSON_OUT = flags.DEFINE_string("json_out", "", "also write the table as JSON to this file")
_CPU_COMBINER = flags.DEFINE_bool(
    "cpu_combiner",
    False,
    "keep the CPU compiler's unbounded all-reduce combiner (read before JAX loads)",
)

GB = 1e9  # = rl.memory_plan.GB, not imported: it loads JAX (decimal GB, as GPUs are quoted)
HEADROOM = 0.10  # the defaults keep at least this fraction of every device free
DEVICE_NAMES = {80.0: "A100/H100", 141.0: "H200"}  # the sizes' usual GPUs, in the row names


def device_label(gb: float) -> str:
    """A device size's name in the table and the JSON: 'A100/H100 80GB', 'H200 141GB', '94GB'."""
    name = DEVICE_NAMES.get(gb)
    return f"{name} {gb:g}GB" if name else f"{gb:g}GB"


# --- the plans ----------------------------------------------------------------------------------


def model_config(path: str, preset: str, **numerics) -> ModelConfig:
    """The role's architecture: its checkpoint's config.json, or the preset its name names."""
    from tango_jax.models import presets, read_config

    if preset:
        return presets.get(preset, **numerics)
    if (Path(path) / "config.json").exists():
        return read_config(path, **numerics)
    name = Path(path).name.lower()
    for key in sorted(presets.PRESETS, key=len, reverse=True):
        if name.startswith(key):
            return presets.get(key, **numerics)
    raise ConfigError(
        f"model.path {path!r}: no config.json there and no preset its name starts with "
        f"(presets: {sorted(presets.PRESETS)}); set --config.<role>.model.preset."
    )


def role_plans(cfg: RunConfig, mesh, layers: list[int] | None) -> dict[str, StepMemory]:
    """{role: its train step's plan, "<role> sampling": its JAX sampler's} for each trained
    role, at `layers` depths extrapolated to the model's (None: compiled whole)."""
    from tango_jax.config.run import SamplerBackend, trained_roles
    from tango_jax.rl.memory_plan import gpu_attention_proxy, linear_fit, step_memory
    from tango_jax.rl.train_step import Objective

    out = {}
    for kind in trained_roles(cfg):
        role = cfg.role(kind)
        # With <role>.lora: the adapters' optimizer state and reference, the base frozen
        numerics = dict(role.model_numerics(), remat=role.remat, lora=role.lora)
        mcfg = model_config(role.model.path, role.model.preset, **numerics)
        # The plan is for GPUs: the kernel a GPU would run, or its nearest CPU stand-in.
        mcfg = mcfg.replace(attention=gpu_attention_proxy(mcfg))
        loss = role.trainer.loss
        bucket = role.response_bucket
        shape = dict(
            rows=cfg.step_prompts(kind) * role.rollout.n,
            prompt_len=role.max_prompt_len,
            response_len=-(-role.rollout.max_tokens // bucket) * bucket,
            with_ref=loss.objective is Objective.POLICY_GRADIENT and bool(loss.kl_coef),
        )
        depths = [mcfg.num_layers] if layers is None else layers
        plans = []
        for depth in depths:
            t0 = time.perf_counter()
            plans.append(step_memory(mcfg.replace(num_layers=depth), role.trainer, mesh, **shape))
            q = plans[-1]
            print(
                f"  {kind.value}: compiled at {depth} layers in {time.perf_counter() - t0:.0f} s: "
                f"arguments {q.arguments / GB:.2f} GB, temporaries {q.temporaries / GB:.2f} GB, "
                f"peak {q.peak / GB:.2f} GB",
                file=sys.stderr,
            )
        plan = plans[0] if layers is None else linear_fit(*plans, mcfg.num_layers)
        out[kind.value] = plan
        print(f"  {kind.value}: {mcfg.num_layers} layers, {shape}", file=sys.stderr)
        if role.sampler.backend is SamplerBackend.JAX:
            out[f"{kind.value} sampling"] = sampler_plan(cfg, kind, mcfg, mesh, depths, layers)
    return out


def sampler_rows(cfg: RunConfig, kind, mesh) -> int:
    """Rows of the role's largest generate call: `max_rows`, or a whole step's if fewer."""
    from tango_jax.parallel.buckets import round_up

    role, dp = cfg.role(kind), mesh.shape["data"] * mesh.shape["fsdp"]
    step_rows = cfg.step_prompts(kind) * role.rollout.n
    return min(round_up(role.sampler.max_rows, dp), round_up(step_rows, dp))


def sampler_plan(cfg: RunConfig, kind, mcfg, mesh, depths, layers) -> GenerateMemory:
    """The embedded JAX sampler's generate call at its largest: `max_rows` rows (or all of a
    step's, if fewer) of prompts padded to the role's prompt budget, `rollout.max_tokens` new."""
    from tango_jax.parallel.buckets import round_up
    from tango_jax.rl.memory_plan import linear_fit
    from tango_jax.rollout.jax_sampler import ROW_BUCKET
    from tango_jax.rollout.memory_plan import generate_memory

    role = cfg.role(kind)
    s = role.sampler
    rows = sampler_rows(cfg, kind, mesh)
    group = round_up(ROW_BUCKET, mesh.shape["data"] * mesh.shape["fsdp"])  # as JaxSampler's
    shape = dict(
        rows=rows,
        prompt_len=round_up(role.max_prompt_len, s.prompt_bucket),
        max_tokens=role.rollout.max_tokens,
        decode_block=s.decode_block,
        # share_prefix: at most rows / n distinct prompts, prefilled in groups of row_bucket
        distinct_rows=round_up(-(-rows // role.rollout.n), group) if s.share_prefix else 0,
    )
    plans = []
    for depth in depths:
        t0 = time.perf_counter()
        plans.append(generate_memory(mcfg.replace(num_layers=depth), mesh, **shape))
        q = plans[-1]
        print(
            f"  {kind.value} sampling: compiled at {depth} layers in "
            f"{time.perf_counter() - t0:.0f} s: KV cache {q.kv_cache / GB:.2f} GB, "
            f"temporaries {q.temporaries / GB:.2f} GB, peak {q.peak / GB:.2f} GB",
            file=sys.stderr,
        )
    print(f"  {kind.value} sampling: {shape}", file=sys.stderr)
    return plans[0] if layers is None else linear_fit(*plans, mcfg.num_layers)


# --- the table and its summary ------------------------------------------------------------------


def table(plans: dict, cfg: RunConfig, mesh, device_gb: list[float]) -> list[dict]:
    """One row per train step and per JAX sampler: its peak beside what else stays resident
    (a sampler runs beside its own role's optimizer state and reference too), and the share
    of each device size in `device_gb` left free."""
    from tango_jax.rl.memory_plan import StepMemory
    from tango_jax.rollout.memory_plan import GenerateMemory
    from tango_jax.tango.kind import Kind

    steps = {n: p for n, p in plans.items() if isinstance(p, StepMemory)}
    rows = []
    for name, p in plans.items():
        role = name.removesuffix(" sampling")
        other = sum(q.resident for n, q in steps.items() if n != role)
        if isinstance(p, GenerateMemory):
            own = steps[role]
            row = {
                "step": name,
                "micro_batch": f"{sampler_rows(cfg, Kind(role), mesh)} rows",
                "params": p.params / GB,
                "opt_state": own.opt_state / GB,
                "ref_params": own.ref_params / GB,
                "batch": p.kv_cache / GB,  # the KV cache (within the temporaries)
                # share_prefix: the distinct prompts' caches beside it while it is laid out
                "shared_prefill": p.prefill_groups / GB,
                "xla_arguments": p.arguments / GB,
                "xla_outputs_not_aliased": p.outputs / GB,
                "xla_temporaries": p.temporaries / GB,
                "step_peak": p.peak / GB,
            }
            other += own.opt_state + own.ref_params
        else:
            row = {
                "step": name,
                "micro_batch": cfg.role(Kind(name)).trainer.micro_batch_size,
                "params": p.params / GB,
                "opt_state": p.opt_state / GB,
                "ref_params": p.ref_params / GB,
                "batch": p.batch / GB,
                "shared_prefill": 0.0,
                "xla_arguments": p.arguments / GB,
                "xla_outputs_not_aliased": (p.outputs - p.aliased) / GB,
                "xla_temporaries": p.temporaries / GB,
                "step_peak": p.peak / GB,
            }
        total = row["step_peak"] * GB + other
        row |= {"other_model_resident": other / GB, "device_total": total / GB}
        for gb in device_gb:
            row[f"headroom {device_label(gb)}"] = 1 - total / GB / gb
        rows.append(row)
    return rows


def table_text(rows: list[dict]) -> str:
    """The rows as a markdown table; a headroom under HEADROOM is marked (!)."""
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for c in cols:
            v = r[c]
            if c.startswith("headroom"):
                cells.append(f"{v:.0%}" + ("" if v >= HEADROOM else " (!)"))
            elif isinstance(v, float):
                cells.append(f"{v:.1f}")
            else:
                cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary_lines(rows: list[dict], device_gb: list[float]) -> list[str]:
    """One line per device size asked about: the rows that would keep less than HEADROOM of
    it free (with their headroom), or that every row keeps that much (and the least)."""
    out = []
    for gb in device_gb:
        key = f"headroom {device_label(gb)}"
        name = f"{gb:g} GB devices" + (f" ({DEVICE_NAMES[gb]})" if gb in DEVICE_NAMES else "")
        short = [r for r in rows if r[key] < HEADROOM]
        if short:
            listed = ", ".join(f"{r['step']} ({r[key]:.0%})" for r in short)
            out.append(f"{name}: less than {HEADROOM:.0%} free in {listed}.")
        else:
            least = min(rows, key=lambda r: r[key])
            out.append(
                f"{name}: every step keeps at least {HEADROOM:.0%} free (the least: "
                f"{least['step']}, {least[key]:.0%})."
            )
    return out


# --- the command --------------------------------------------------------------------------------


def _device_sizes(values: list[str]) -> list[float]:
    try:
        sizes = [float(v) for v in values]
    except ValueError:
        sizes = []
    if not sizes or any(not gb > 0 for gb in sizes):
        raise ConfigError(
            f"--device_gb {','.join(values)}: give device memory sizes in GB, each > 0, "
            "comma-separated (e.g. --device_gb 80,141)."
        )
    return sizes


def _depths(value: str) -> list[int] | None:
    """--layers: None for 'full', else its two depths."""
    if value == "full":
        return None
    try:
        layers = [int(x) for x in value.split(",")]
    except ValueError:
        layers = []
    if len(layers) != 2 or min(layers) < 1 or layers[0] == layers[1]:
        raise ConfigError(
            f"--layers {value}: give two different depths to extrapolate from (e.g. --layers "
            "4,8), or --layers full."
        )
    return layers


def _flag_value(argv: list[str], name: str) -> str | None:
    """The last `--name=V` / `--name V` of `argv` (read before absl parses it)."""
    value = None
    for i, arg in enumerate(argv):
        if arg.startswith(f"--{name}="):
            value = arg.split("=", 1)[1]
        elif arg == f"--{name}" and i + 1 < len(argv):
            value = argv[i + 1]
    return value


def _cpu_combiner(argv: list[str]) -> bool:
    """--cpu_combiner as absl reads it (the last of --cpu_combiner[=BOOL] / --nocpu_combiner)."""
    value = False
    for arg in argv:
        if arg in ("--cpu_combiner", "--nocpu_combiner"):
            value = arg == "--cpu_combiner"
        elif arg.startswith("--cpu_combiner="):
            value = arg.split("=", 1)[1].lower() in ("true", "t", "1", "yes", "y")
    return value


def _simulate_devices(argv: list[str]) -> None:
    """XLA_FLAGS for the plan, set before JAX loads (the config file imports it): `--devices`
    simulated CPU devices, the memory-minimising scheduler, and (unless --cpu_combiner) no
    CPU all-reduce combiner."""
    given = _flag_value(argv, "devices") or "8"
    if not given.isdigit() or int(given) < 1:
        raise ConfigError(f"--devices {given}: give the number of training devices (>= 1).")
    os.environ["JAX_PLATFORMS"] = "cpu"
    flags_env = re.sub(
        r"--xla_force_host_platform_device_count=\d+", "", os.getenv("XLA_FLAGS", "")
    )
    # The CPU backend's default scheduler optimises for concurrency and starts every
    # rematerialised forward early, keeping all layers' recomputed activations alive at once;
    # the memory-minimising scheduler orders the program as a GPU's memory-aware one would.
    os.environ["XLA_FLAGS"] = (
        f"{flags_env} --xla_force_host_platform_device_count={int(given)}"
        " --xla_cpu_enable_concurrency_optimized_scheduler=false"
    )
    # The CPU's all-reduce combiner has no size limit and merges every layer's gradient
    # reduction into one, keeping all layers' unsharded float32 gradients alive at once; a
    # GPU's combines only up to a threshold far below one large layer's gradients, so the plan
    # leaves the CPU's out (docs/scaling.md). --cpu_combiner keeps it (the plans before
    # 2026-11-27).
    if not _cpu_combiner(argv):
        os.environ["XLA_FLAGS"] += " --xla_disable_hlo_passes=cpu-all-reduce-combiner"


def _usage() -> str:
    paragraphs = __doc__.split("\n\n")
    return "\n\n".join(
        [
            *paragraphs[:3],
            "flags: --config FILE[:VARIANT] [--config.a.b=VALUE ...] [--devices 8] "
            "[--layers 4,8|full] [--device_gb 80,141] [--json_out FILE] [--cpu_combiner]",
        ]
    )


def _parse_flags(argv: list[str]) -> list[str]:
    """--help (exit 0); the XLA flags, before JAX loads; then train's parse of the config and
    its overrides (`cli.parse_config_flags`): every mistake one line naming the fix."""
    if any(a in cli.HELP_FLAGS for a in argv[1:]):
        print(_usage())
        sys.exit(0)
    try:
        _simulate_devices(argv)
        return cli.parse_config_flags(argv)
    except ConfigError as e:
        sys.exit(f"config error: {e}")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        sys.exit(
            f"config error: unexpected arguments {argv[1:]}; override a field with "
            "--config.a.b=value (python -m tango_jax.plan_memory --help)."
        )
    if _CONFIG.value is None:
        sys.exit("config error: no --config; pass --config configs/NAME.py[:VARIANT].")
    import jax

    from tango_jax.config.run import check_micro_batches, load_run_config
    from tango_jax.parallel.mesh import data_parallel_size, make_mesh

    try:
        cfg = load_run_config(_CONFIG.value)
        layers, device_gb = _depths(_LAYERS.value), _device_sizes(_DEVICE_GB.value)
        mesh = make_mesh(cfg.mesh)  # a mesh the devices cannot hold: ValueError naming it
        check_micro_batches(cfg, data_parallel_size(mesh))  # as train checks them
    except ValueError as e:  # ConfigError included
        sys.exit(f"config error: {e}")
    print(
        f"{cfg.name}: mesh {dict(mesh.shape)} over {jax.device_count()} simulated "
        f"{jax.default_backend()} devices; GB = 1e9 bytes per device",
        file=sys.stderr,
    )
    try:
        rows = table(role_plans(cfg, mesh, layers), cfg, mesh, device_gb)
    except ConfigError as e:  # a model it cannot find the architecture of
        sys.exit(f"config error: {e}")
    combiner = "without" if "cpu-all-reduce-combiner" in os.environ["XLA_FLAGS"] else "with"
    depth = "compiled at full depth" if layers is None else f"extrapolated from {layers} layers"
    print(
        f"\n{cfg.name}, mesh {dict(mesh.shape)}, {depth} (CPU compiler's plan, {combiner} its "
        "all-reduce combiner; GB per device)\n"
    )
    print(table_text(rows))
    if _JSON_OUT.value:
        Path(_JSON_OUT.value).write_text(json.dumps(rows, indent=1))
    print(f"\nheadroom (at least {HEADROOM:.0%} of each device free):")
    print("\n".join(f"  {line}" for line in summary_lines(rows, device_gb)))


if __name__ == "__main__":
    app.run(main, flags_parser=_parse_flags)
