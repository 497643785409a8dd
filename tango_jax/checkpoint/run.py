"""Run checkpoints: both trainers' sharded state and the loop's host state, with orbax.

    ckpt = RunCheckpointer(run_dir / CHECKPOINT_SUBDIR, keep=3,
                           models={"generator": ModelInfo.from_model(gen_model, tok_dir), ...})
    ckpt.save(step, {"generator": gen.state_dict(), "verifier": ver.state_dict()}, host_state)
    ...
    trainers, host_state = ckpt.restore(None, {"generator": gen.state_dict(), ...})
    gen.load_state_dict(trainers["generator"])
    ckpt.close()                                                          # before exit

This is the only module that imports orbax (house style: external systems behind narrow
modules). One checkpoint step is one orbax step directory holding, per role R,
`R_params` and `R_opt_state` (sharded arrays, written by every process straight from its own
shards, never gathered) and `host` (one JSON document: the trainers' step counters, the
loop's `host_state` and each role's `ModelInfo`). Params and optimizer state are separate
items so that HF export reads the params only.

Array trees are stored as nested dicts of strings built from their key paths (an nnx.State
leaf `layers/0/attention/q/value`, an optax leaf `1/0/mu/embed/value`), and restored into the
structure of the caller's target. The files therefore do not depend on how flax or optax
register their pytree nodes, and restoring onto a different mesh is just a target with other
shardings: orbax reads each device's slice of the stored arrays (tested 8 -> 8 devices with a
different layout, and 8 -> 1).

Damage (a step that fails to restore is skipped and moved aside): checkpoint/guards.py; the
stop before a non-finite step is saved: check_finite, below. With several processes each one
calls restore: the finite check is one jitted reduction per device set (collectives in the same
order everywhere), a step that fails on any process fails on all, and process 0 moves it while
the others wait at a barrier, so all processes resume the same step.

Atomicity: orbax writes each step under `<step>.orbax-checkpoint-tmp-*` and renames it into
place only when every item is complete; unfinished directories are invisible to
`all_steps`/`restore` and are deleted when the next `RunCheckpointer` opens the directory. A
crash mid-save therefore leaves the previous checkpoint as the latest one (tested by killing a
process inside the final rename). Saves are asynchronous: `save` returns once the arrays are
copied off the devices (so the next train step may donate them) and the writes finish in the
background; `wait_until_finished`/`close` block until they are on disk.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from etils import epath
from jax.experimental import multihost_utils

from tango_jax.checkpoint.guards import (
    CheckpointMismatchError,
    NonFiniteError,
    all_finite,
    latest_readable,
    move_aside,
)
from tango_jax.models.config import ModelConfig, dtype_from_name
from tango_jax.models.lora import LoraConfig

log = logging.getLogger(__name__)

CHECKPOINT_SUBDIR = "checkpoints"  # a run's checkpoints live in run_dir / CHECKPOINT_SUBDIR
FORMAT_VERSION = 1
_HOST_ITEM = "host"
_ARRAY_PARTS = ("params", "opt_state")


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """What HF export needs to rebuild a role's model without the run's config files.

    hf_config: the model's `config.json` dict (`ModelConfig.to_hf_dict`), whose `torch_dtype`
      is the parameter dtype, so the stored arrays restore into parameters of the same dtype.
    tokenizer_dir: the local tokenizer directory the run used (None: export without one).
    lora: the model's `LoraConfig` fields when it has LoRA adapters (None: it has none). The
      checkpoint then holds the adapters only (the trained parameters); the frozen base
      weights are those of `base_dir`, the HF checkpoint the role started from.
    """

    hf_config: dict[str, Any]
    tokenizer_dir: str | None = None
    lora: dict[str, Any] | None = None
    base_dir: str | None = None

    @classmethod
    def from_model(
        cls,
        model,
        tokenizer_dir: str | os.PathLike | None = None,
        *,
        base_dir: str | os.PathLike | None = None,
    ) -> ModelInfo:
        cfg = model.config
        hf = cfg.to_hf_dict(torch_dtype=jnp.dtype(cfg.param_dtype).name)
        resolved = lambda p: None if p is None else str(Path(p).resolve())
        if not cfg.lora.enabled:
            return cls(hf, resolved(tokenizer_dir))
        if base_dir is None:
            raise ValueError("ModelInfo.from_model: a model with LoRA adapters needs base_dir.")
        lora = dataclasses.asdict(cfg.lora)
        return cls(hf, resolved(tokenizer_dir), lora=lora, base_dir=resolved(base_dir))

    def model_config(self, **overrides) -> ModelConfig:
        """The architecture, with the stored parameter dtype unless overridden."""
        overrides.setdefault("param_dtype", dtype_from_name(self.hf_config["torch_dtype"]))
        if self.lora is not None:
            lora = self.lora | {"targets": tuple(self.lora["targets"])}
            overrides.setdefault("lora", LoraConfig(**lora))
        return ModelConfig.from_hf_dict(self.hf_config, source="checkpoint ModelInfo", **overrides)


# --- array trees <-> nested string-keyed dicts --------------------------------------------------


def _key_name(k) -> str:
    for attr in ("key", "idx", "name"):  # DictKey / FlattenedIndexKey, SequenceKey, GetAttrKey
        if hasattr(k, attr):
            return str(getattr(k, attr))
    raise TypeError(f"unsupported pytree key {k!r}")


def _paths(tree) -> tuple[list[tuple[str, ...]], list[Any], Any]:
    with_path, treedef = jax.tree_util.tree_flatten_with_path(tree)
    paths = [tuple(_key_name(k) for k in path) for path, _ in with_path]
    if len(set(paths)) != len(paths):
        raise ValueError("two leaves of a checkpointed tree map to the same key path.")
    return paths, [leaf for _, leaf in with_path], treedef


def _nest(paths, leaves) -> dict:
    out: dict = {}
    for path, leaf in zip(paths, leaves):
        node = out
        for name in path[:-1]:
            node = node.setdefault(name, {})
        node[path[-1]] = leaf
    return out


def _lookup(nested: dict, path: tuple[str, ...]):
    for name in path:
        nested = nested[name]
    return nested


def _abstract(leaf, where: str) -> jax.ShapeDtypeStruct:
    sharding = getattr(leaf, "sharding", None)
    if sharding is None:
        raise TypeError(
            f"restore target {where} is a {type(leaf).__name__} without a sharding; pass the "
            "live trainer's state_dict() (jax.Arrays) or jax.ShapeDtypeStruct(..., sharding=...)."
        )
    return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding)


def _check_like(saved_md: dict, paths, targets, what: str) -> None:
    """Clear errors for a target that does not match the stored tree (shape, dtype, keys)."""
    saved = dict(zip(*_paths(saved_md)[:2]))
    missing = [p for p in paths if p not in saved]
    if missing:
        raise CheckpointMismatchError(
            f"{what}: the checkpoint has no {'/'.join(missing[0])} ({len(missing)} target "
            "leaves missing); the live model or optimizer differs from the run's. Rebuild it "
            "from the run's config."
        )
    for path, target in zip(paths, targets):
        md = saved[path]
        if tuple(md.shape) != tuple(target.shape) or jnp.dtype(md.dtype) != target.dtype:
            raise CheckpointMismatchError(
                f"{what}: {'/'.join(path)} is stored as {tuple(md.shape)} {md.dtype} but the "
                f"target is {tuple(target.shape)} {target.dtype}; the live model differs from "
                "the run's (model config or param dtype changed)."
            )


def _json_roundtrip(value, what: str):
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"{what} is not strict JSON ({e}): store finite numbers, strings, lists and "
            "str-keyed dicts; convert numpy values with .item() / .tolist()."
        ) from e
    if json.loads(text) != value:
        raise ValueError(
            f"{what} changes in a JSON round trip (tuples become lists, int dict keys become "
            "strings); store lists and str keys so that resume sees exactly what was saved."
        )
    return value


class _KeepScheduled:
    """An orbax preservation policy: the newest `keep` scheduled steps, and the newest step of
    any kind (levanter's temporary time-based checkpoints: each replaces the previous one)."""

    def __init__(self, keep: int, scheduled: Callable[[int], bool]):
        self.keep, self.scheduled = keep, scheduled

    def should_preserve(self, checkpoints: Sequence[Any], *, context: Any) -> list[bool]:
        steps = [c.step for c in checkpoints]
        if not steps:
            return []
        kept = {max(steps)} | set(sorted(s for s in steps if self.scheduled(s))[-self.keep :])
        return [s in kept for s in steps]


# --- the checkpointer --------------------------------------------------------------------------


class RunCheckpointer:
    """Saves and restores a Tango run: every role's trainer state plus the loop's host state.

    directory: the run's checkpoint directory (by convention `run_dir / CHECKPOINT_SUBDIR`).
    keep: how many of the newest steps to keep; older ones are deleted after each save.
    scheduled: step -> whether it is one of the run's scheduled checkpoints (every_steps, at
      the end). Given, `keep` counts only those, and any other step (a time-based or signal
      checkpoint) is kept only while it is the newest; None: every step counts.
    models: role -> ModelInfo; required for `save` (so every step can be exported to HF),
      unused when only restoring or exporting.
    async_save: write in the background after the device-to-host copy (default); False makes
      `save` return only when the step is final on disk.
    read_only: for export and analysis beside a live run: never saves, deletes old steps or
      cleans the live run's in-flight temporary directories.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        keep: int,
        models: Mapping[str, ModelInfo] | None = None,
        scheduled: Callable[[int], bool] | None = None,
        async_save: bool = True,
        read_only: bool = False,
    ):
        if keep < 1:
            raise ValueError(f"`keep` ({keep}) must be >= 1: the last good step must survive.")
        self.directory = Path(directory).resolve()
        self.models = dict(models or {})
        self.read_only = read_only
        if read_only and not self.directory.is_dir():
            raise FileNotFoundError(f"{self.directory}: no such checkpoint directory.")
        keeping: dict[str, Any] = {"max_to_keep": keep}
        if scheduled is not None:
            keeping = {"preservation_policy": _KeepScheduled(keep, scheduled)}
        options = ocp.CheckpointManagerOptions(
            **keeping,
            # A writer drops the leftovers of a crashed save on open; a reader must not.
            cleanup_tmp_directories=not read_only,
            enable_async_checkpointing=async_save,
            read_only=read_only,
            create=not read_only,
        )
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    # --- steps ---

    def all_steps(self) -> list[int]:
        """Saved steps, ascending; includes a step whose asynchronous write is still in flight
        (call `wait_until_finished` first to see only finalised ones)."""
        return sorted(self._manager.all_steps())

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def wait_until_finished(self) -> None:
        self._manager.wait_until_finished()

    def close(self) -> None:
        """Waits for pending writes and releases the manager; call before the process exits."""
        self._manager.close()

    def __enter__(self) -> RunCheckpointer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- save ---

    def save(self, step: int, trainers: Mapping[str, Mapping[str, Any]], host_state: dict) -> None:
        """Saves `trainers` (role -> `Trainer.state_dict()`) and `host_state` as `step`.

        host_state must be strict JSON that survives a round trip unchanged (checked here):
        e.g. a NumPy generator as `rng.bit_generator.state`, a JAX key as
        `jax.random.key_data(key).tolist()` (back: `jax.random.wrap_key_data`), EMA state as
        `ClassBalanceState.to_dict()`. Returns after the device-to-host copy; the write
        completes in the background.
        """
        if self.read_only:
            raise ValueError(f"{self.directory} was opened read_only; open it to save.")
        if step in self._manager.all_steps():
            raise ValueError(
                f"step {step} is already saved in {self.directory}; after restoring an older "
                "step, delete the newer ones or resume in a new run directory."
            )
        missing = sorted(set(trainers) - set(self.models))
        if missing:
            raise ValueError(
                f"no ModelInfo for roles {missing}: pass models={{role: ModelInfo.from_model("
                "model, tokenizer_dir)}} to RunCheckpointer so every step can be exported."
            )
        host = {
            "format": FORMAT_VERSION,
            "trainer_steps": {role: int(t["step"]) for role, t in trainers.items()},
            "models": {role: dataclasses.asdict(self.models[role]) for role in trainers},
            "host_state": _json_roundtrip(host_state, "host_state"),
        }
        items: dict[str, Any] = {_HOST_ITEM: ocp.args.JsonSave(host)}
        for role, state in trainers.items():
            for part in _ARRAY_PARTS:
                paths, leaves, _ = _paths(state[part])
                items[f"{role}_{part}"] = ocp.args.StandardSave(_nest(paths, leaves))
        self._manager.save(int(step), args=ocp.args.Composite(**items))

    # --- restore ---

    def _step_or_latest(self, step: int | None) -> int:
        self.wait_until_finished()
        steps = self.all_steps()
        if step is None:
            if not steps:
                raise FileNotFoundError(f"{self.directory}: no finalised checkpoint to restore.")
            return steps[-1]
        if step not in steps:
            raise FileNotFoundError(
                f"{self.directory}: step {step} is not a finalised checkpoint; saved steps are "
                f"{steps}."
            )
        return step

    def host(self, step: int | None = None) -> dict:
        """The JSON item of `step`: trainer_steps, models, host_state. None: the latest
        readable step's (an unreadable one is moved aside, see the module docstring)."""
        if step is None:
            return self._latest_readable(self._host)[1]
        return self._host(self._step_or_latest(step))

    def _host(self, step: int) -> dict:
        host = self._manager.restore(step, args=ocp.args.Composite(host=ocp.args.JsonRestore()))[
            _HOST_ITEM
        ]
        if not isinstance(host, dict) or host.get("format") != FORMAT_VERSION:
            raise ValueError(f"its host item is not a format-{FORMAT_VERSION} document.")
        return host

    # --- damage (checkpoint/guards.py) ---

    def _latest_readable(self, read) -> tuple[int, Any]:
        """(step, read(step)) for the newest step that `read` reads (`latest_readable`)."""
        self.wait_until_finished()
        return latest_readable(self.directory, self.all_steps(), read, self._set_aside)

    def _set_aside(self, step: int) -> None:
        """Moves step `step` to <directory>_damaged/<step> (read-only: leaves it there)."""
        if self.read_only:
            return
        # The checkpoint directory is shared by all processes (orbax writes it from each):
        # process 0 moves the step, the others wait for the move before they list the steps.
        if jax.process_index() == 0:
            dest = move_aside(self.directory, step)
            log.warning(
                "moved the unreadable checkpoint step %d to %s (kept, not deleted)", step, dest
            )
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices(f"tango_jax checkpoint set aside {step}")
        self._manager.reload()

    def model_info(self, step: int | None, role: str) -> ModelInfo:
        models = self.host(step)["models"]
        if role not in models:
            raise KeyError(f"role '{role}' is not in this checkpoint; it has {sorted(models)}.")
        return ModelInfo(**models[role])

    def _restore_parts(self, step: int, targets: Mapping[str, Any]) -> dict[str, Any]:
        """item name -> restored tree shaped like its target (a tree of arrays or abstracts)."""
        layouts, items = {}, {}
        for name, target in targets.items():
            item_dir = self.directory / str(step) / name  # orbax's default step naming
            if not item_dir.is_dir():
                raise KeyError(f"checkpoint step {step} has no item '{name}' ({item_dir}).")
            # Read through the handler: a manager that has not restored this item yet (a new
            # process) does not know its handler, and `item_metadata` would return None.
            metadata = ocp.StandardCheckpointHandler().metadata(epath.Path(item_dir))
            paths, leaves, treedef = _paths(target)
            abstract = [_abstract(x, f"{name}/{'/'.join(p)}") for p, x in zip(paths, leaves)]
            _check_like(metadata.tree, paths, abstract, f"step {step} {name}")
            layouts[name] = (paths, treedef)
            items[name] = ocp.args.StandardRestore(_nest(paths, abstract))
        restored = self._manager.restore(step, args=ocp.args.Composite(**items))
        return {
            name: jax.tree_util.tree_unflatten(treedef, [_lookup(restored[name], p) for p in paths])
            for name, (paths, treedef) in layouts.items()
        }

    def restore(
        self, step: int | None, targets: Mapping[str, Mapping[str, Any]]
    ) -> tuple[dict[str, dict[str, Any]], dict]:
        """Restores `step` (None: the latest) onto `targets`' structures and shardings.

        targets: role -> a `Trainer.state_dict()` of the live trainer (its arrays give the
        shardings; the mesh may differ from the saving run's) or the same tree of
        `jax.ShapeDtypeStruct(..., sharding=...)`. Returns (role -> state dict ready for
        `Trainer.load_state_dict`, host_state).
        """
        if step is None:
            return self._latest_readable(lambda s: self._restore_step(s, targets))[1]
        return self._restore_step(self._step_or_latest(step), targets)

    def _restore_step(
        self, step: int, targets: Mapping[str, Mapping[str, Any]]
    ) -> tuple[dict[str, dict[str, Any]], dict]:
        host = self._host(step)
        saved_roles = sorted(host["trainer_steps"])
        if sorted(targets) != saved_roles:
            raise CheckpointMismatchError(
                f"restore targets have roles {sorted(targets)} but step {step} holds {saved_roles}."
            )
        arrays = self._restore_parts(
            step,
            {f"{role}_{part}": targets[role][part] for role in targets for part in _ARRAY_PARTS},
        )
        trainers = {
            role: {part: arrays[f"{role}_{part}"] for part in _ARRAY_PARTS}
            | {"step": host["trainer_steps"][role]}
            for role in targets
        }
        bad = _nonfinite_leaves(arrays)
        if bad:
            raise ValueError(f"step {step} holds non-finite values in {bad[:3]}.")
        return trainers, host["host_state"]

    def restore_params(self, step: int | None, role: str, target_params) -> Any:
        """Only `role`'s parameters at `step`, onto `target_params`' shardings (for export)."""
        step = self._step_or_latest(step)
        return self._restore_parts(step, {f"{role}_params": target_params})[f"{role}_params"]


def _nonfinite_leaves(tree: Mapping[str, Any]) -> list[str]:
    """Key paths of floating-point leaves of `tree` holding a NaN or infinity; the same list on
    every process (a collective when the arrays span processes: all processes must call it)."""
    paths, leaves, _ = _paths(tree)
    floats = [(p, x) for p, x in zip(paths, leaves) if jnp.issubdtype(x.dtype, jnp.floating)]
    ok = all_finite([x for _, x in floats])
    return ["/".join(p) for (p, _), good in zip(floats, ok) if not good]


# --- stopping on non-finite steps --------------------------------------------------------------


def last_good(checkpointer: RunCheckpointer) -> str:
    """Where the run can resume from, for a stop message: the latest saved step (saved only
    after its own step's metrics passed every check, so it is a good one)."""
    checkpointer.wait_until_finished()
    last = checkpointer.latest_step()
    if last is None:
        return f"no checkpoint has been saved yet in {checkpointer.directory}"
    return f"the last good checkpoint is step {last} in {checkpointer.directory} and is untouched"


def check_finite(
    metrics: Mapping[str, float], *, role: str, step: int, checkpointer: RunCheckpointer
) -> None:
    """Raises NonFiniteError if any of a step's metrics is non-finite (loss, gradient norm,
    log-probs and their drift, rewards, advantages, norms) or the trainer rejected the update.

    Call it before the step is checkpointed: nothing is saved here, so the last checkpoint
    stays the last good one, and the message says which step that is so the user can resume
    from it. A rejected update leaves the params as they were before the step.
    """
    bad = sorted(k for k, v in metrics.items() if not math.isfinite(v))
    rejected = any(k.rsplit("/", 1)[-1] == "nonfinite" and v for k, v in metrics.items())
    if not bad and not rejected:
        return
    shown = ", ".join(f"{k}={metrics[k]}" for k in bad[:6]) + (
        f" and {len(bad) - 6} more" if len(bad) > 6 else ""
    )
    what = "the update was rejected and the run stops" if rejected else "the run stops"
    raise NonFiniteError(
        f"{role} step {step}: non-finite {shown or 'update'}. {what[0].upper()}{what[1:]}; "
        f"{last_good(checkpointer)}. Lower the learning rate or inspect the batch, then resume "
        "from that checkpoint."
    )
