"""Checks a run's config against the file system before anything heavy starts or is written.

    check(cfg)          every path the run reads (models, data, SFT data) exists and has content
                        (a model of a supported architecture; every record of the data files
                        with its question and answer), and run_dir may be used as the config
                        says (a new run, or a resume of the same config); raises ConfigError
                        naming the field, the value and the fix (the flag to pass)
    write_config(cfg)   then, and only then, run_dir/config.json (the previous one, when a
                        resume was allowed to change fields, kept as config_history/<k>.json)

`RunConfig` checks every field on its own when it is built (config.py); what needs the disk is
here, so that a missing model folder fails in the first second, not after the other role's SFT,
and a refused command leaves run_dir exactly as it was.

Resuming with a different config. A run directory holds one experiment: `resume=True` on a
directory whose config.json differs from the new config stops with the list of differing
fields, unless each of them is allowed. Always allowed are the fields that change neither the
training computation nor its data: `RESUME_MAY_CHANGE` (logging, evaluation, checkpointing,
where the vLLM servers are). Others, `schedule.total_steps` for instance (extending a run also
moves the α schedule's horizon), must be named in `resume_may_change`, e.g.
`--config.resume_may_change='("schedule.total_steps",)'`; a group name allows all its fields.
"""

from __future__ import annotations

import glob
import json
import logging
import os
from pathlib import Path
from typing import Any

from tango_jax.config.roles import RoleConfig
from tango_jax.config.run import RunConfig, SamplerBackend, enabled_roles, saved_run_config
from tango_jax.data.prompts import read_problems
from tango_jax.data.sft_records import read_sft_records
from tango_jax.data.tasks import task_of
from tango_jax.metrics.wandb import check_installed
from tango_jax.models.config import ModelConfig
from tango_jax.models.peft import ADAPTER_WEIGHTS, read_peft_config
from tango_jax.schema import ConfigError, config_dict, to_dict
from tango_jax.tango.kind import Kind
from tango_jax.text import reward_function
from tango_jax.text.template_files import load_templates

log = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
CONFIG_HISTORY = "config_history"
CHECKPOINT_SUBDIR = "checkpoints"  # = checkpoint.CHECKPOINT_SUBDIR (kept free of orbax here)
_VLLM_CLIENT = (
    "urls",
    "api_key",
    "api_key_env",
    "request_timeout_s",
    "max_concurrency",
    "max_restarts",
)

# Fields that may differ from the saved config on resume without being named: they change what
# is logged, evaluated or saved, or where the servers run, never a training step.
RESUME_MAY_CHANGE: tuple[str, ...] = (
    "name",
    "run_dir",  # a run directory moved or copied elsewhere
    "resume",
    "resume_may_change",
    "tensorboard",
    "log_rollouts",
    "wandb",
    "scorer_workers",
    "drift_all_batches",
    "divergence",  # when to stop: e.g. action=warn to go on past a stop
    "eval",
    "checkpoint",
    # how the trainer processes join (each process has its own process_id; a run saved by N
    # processes resumes in M): the layout, not the computation, which `mesh` fixes
    "distributed",
    *(f"{k.value}.sampler.vllm.{f}" for k in Kind for f in (*_VLLM_CLIENT, "verify_after_sync")),
)


def check(cfg: RunConfig) -> list[str]:
    """All the checks below; writes nothing. Returns the notes: what is worth saying but not
    refusing (`check_paths`), said by the caller that goes on to run, so that a run says each
    once although both the command and the loop check (train.py, run/loop.py)."""
    notes = check_paths(cfg)
    check_keys(cfg)
    check_run_dir(cfg)
    return notes


def check_keys(cfg: RunConfig) -> None:
    """Each vLLM key named by `api_key_env` is set, so a run that needs it fails now, not when
    its sampler starts after SFT."""
    for kind in enabled_roles(cfg):
        sampler = cfg.role(kind).sampler
        name = sampler.vllm.api_key_env
        if sampler.backend is SamplerBackend.VLLM and name and not os.environ.get(name):
            _fail(
                f"{kind.value}.sampler.vllm.api_key_env",
                name,
                "names an environment variable that is unset or empty; export it with the "
                "servers' key before launching.",
            )


# --- inputs ------------------------------------------------------------------------------------


def _fail(field: str, value: Any, rule: str) -> None:
    raise ConfigError(f"config.{field} ({value!r}) {rule}")


def _nonempty_file(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


def check_model_dir(field: str, path: str) -> None:
    """`path` is a Hugging Face checkpoint directory with content: a config.json that parses,
    safetensors weights and tokenizer files, none of them empty."""
    p = Path(path)
    what = "a Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer files)"
    if not p.exists():
        _fail(field, path, f"does not exist; point it at {what}.")
    if not p.is_dir():
        _fail(field, path, f"is a file, not a directory; point it at {what}.")
    config = p / "config.json"
    if not _nonempty_file(config):
        _fail(field, path, f"has no config.json (or an empty one); point it at {what}.")
    try:
        hf_config = json.loads(config.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        _fail(field, path, f"has a config.json that is not JSON ({e}); re-export it.")
    try:  # the architecture is one tango_jax implements, before any weight is read
        ModelConfig.from_hf_dict(hf_config, source="its config.json")
    except ValueError as e:
        _fail(field, path, f"is a model tango_jax cannot load: {e} Choose such a checkpoint.")
    except (KeyError, TypeError) as e:
        _fail(field, path, f"has a config.json without a usable {e} entry; re-export it.")
    weights = sorted(p.glob("*.safetensors"))
    if not weights:
        _fail(field, path, f"has no *.safetensors weights; point it at {what}.")
    empty = [w.name for w in weights if w.stat().st_size == 0]
    if empty:
        _fail(field, path, f"has empty weight files {empty}; re-download or re-export them.")
    tokenizer = [p / n for n in ("tokenizer.json", "tokenizer_config.json")]
    if not any(_nonempty_file(t) for t in tokenizer):
        _fail(
            field,
            path,
            "has no tokenizer.json or tokenizer_config.json; copy the tokenizer files of the "
            "model into it.",
        )


def check_lora_start(role: str, role_cfg: RoleConfig) -> None:
    """`<role>.lora.init_from`, if set, is a PEFT LoRA adapter with the role's rank, alpha and
    targets (read from its adapter_config.json; its tensors are checked when they load)."""
    lora = role_cfg.lora
    if not lora.init_from:
        return
    field = f"{role}.lora.init_from"
    if not role_cfg.trainable and role_cfg.sampler.backend is SamplerBackend.VLLM:
        _fail(
            field,
            lora.init_from,
            f"would not reach the vLLM server of a frozen {role} (it serves the base and is "
            f"never synced); set {role}.sampler.backend=jax, or merge the adapter into the base "
            f"(PEFT's merge_and_unload) and set {role}.model.path to the result.",
        )
    try:
        theirs = read_peft_config(lora.init_from)
    except (FileNotFoundError, ValueError, KeyError) as e:
        _fail(field, lora.init_from, f"cannot be used: {e}")
    if not Path(lora.init_from, ADAPTER_WEIGHTS).exists():
        _fail(field, lora.init_from, f"has no {ADAPTER_WEIGHTS}.")
    if (theirs.rank, theirs.alpha, set(theirs.targets)) != (
        lora.rank,
        lora.alpha,
        set(lora.targets),
    ):
        _fail(
            field,
            lora.init_from,
            f"holds an adapter of rank {theirs.rank}, alpha {theirs.alpha}, targets "
            f"{list(theirs.targets)}; set {role}.lora.rank, alpha and targets to these.",
        )


def _check_data_file(field: str, pattern: str) -> None:
    """A file or glob that matches at least one non-empty file."""
    matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
    files = [Path(m) for m in matches if Path(m).is_file()]
    if not files:
        _fail(field, pattern, "matches no file; give the path (or glob) of a local data file.")
    empty = [str(f) for f in files if f.stat().st_size == 0]
    if empty:
        _fail(field, pattern, f"includes empty files {empty}.")


def check_paths(cfg: RunConfig) -> list[str]:
    """Every path the run will read, for every role it loads and every stage it runs; returns
    the notes (a held-out file smaller than data.eval_size: a cap, not a requirement)."""
    notes = []
    for kind in enabled_roles(cfg):
        path = cfg.role(kind).model.path
        if path and kind is Kind.VERIFIER and cfg.sft.verifier.start_from_generator:
            _fail(
                "verifier.model.path",
                path,
                "would not be read: sft.verifier.start_from_generator=True starts the verifier "
                "from the generator's SFT; set sft.verifier.start_from_generator=False to start "
                "it from this path, or leave verifier.model.path empty.",
            )
        if path:
            check_model_dir(f"{kind.value}.model.path", path)
        check_lora_start(kind.value, cfg.role(kind))
        stage = cfg.sft.stage(kind)
        if stage.enable:
            if stage.data_path:
                field = f"sft.{kind.value}.data_path"
                _check_data_file(field, stage.data_path)
                try:  # every record: JSON, a response, a prompt or what makes one
                    read_sft_records(
                        stage.data_path,
                        verifier=kind is Kind.VERIFIER,
                        style=cfg.data.templates,
                    )
                except (FileNotFoundError, ValueError) as e:  # a glob: one file is read
                    _fail(field, stage.data_path, f"cannot be used: {e}")
            elif not cfg.data.source.generated:
                _fail(
                    f"sft.{kind.value}.data_path",
                    stage.data_path,
                    "is required when the SFT stage is on and data.source is not 'synthetic' or "
                    "'last_letter' (only those have built-in SFT data); give a JSONL of "
                    "{question, response} records.",
                )
    if not cfg.data.source.generated:
        _check_data_file("data.train_path", cfg.data.train_path)
        _check_data_file("data.eval_path", cfg.data.eval_path)
        records = {}
        for split in ("train", "eval"):  # every record: fields, questions, answers
            try:
                records[split] = len(read_problems(cfg.data, split))
            except ConfigError:
                raise
            except ValueError as e:  # a record that is not JSON, an empty question, ...
                _fail(
                    f"data.{split}_path", getattr(cfg.data, f"{split}_path"), f"cannot be read: {e}"
                )
        for field in ("prompts_per_step", "verifier_prompts_per_step"):
            batch = getattr(cfg.data, field)  # a step's batch: distinct problems
            if records["train"] < batch:
                _fail(
                    f"data.{field}",
                    batch,
                    f"is more than the {records['train']} records of data.train_path "
                    f"({cfg.data.train_path}); lower it (--config.data.{field}="
                    f"{records['train']}) or add records.",
                )
        if records["eval"] < cfg.data.eval_size:  # a cap, not a requirement: said, not refused
            n = records["eval"]
            notes.append(
                f"data.eval_size ({cfg.data.eval_size}) is more than the {n} records of "
                f"data.eval_path ({cfg.data.eval_path}): each held-out evaluation uses all {n} "
                f"(pass --config.data.eval_size={n} to say so)"
            )
    task_of(cfg.data)  # a task of one's own (data.task) imports and is made
    load_templates(cfg.data.prompt_style, cfg.data.template_files)  # files exist and check out
    if cfg.data.reward:  # imports, and is a function of (completion, answer, question)
        reward_function.load(cfg.data.reward)
    check_installed(cfg.wandb)  # W&B logging on: the package is there
    return notes


# --- the run directory -------------------------------------------------------------------------


def holds_run(run_dir: Path) -> bool:
    """Whether `run_dir` holds (part of) a run: its config, metrics, SFT or checkpoints."""
    ckpts = run_dir / CHECKPOINT_SUBDIR
    return (
        (run_dir / CONFIG_FILE).exists()
        or (run_dir / "metrics.jsonl").exists()
        or (run_dir / "sft").exists()
        or (ckpts.is_dir() and any(ckpts.iterdir()))
    )


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        out = {}
        for k, v in tree.items():
            out |= _flat(v, f"{prefix}{k}.")
        return out
    return {prefix.removesuffix("."): tree}


def _defaults() -> dict[str, Any]:
    return _flat(to_dict(config_dict(RunConfig).to_dict()))


def config_changes(saved: dict, new: dict) -> list[str]:
    """Dotted fields of `new` whose values differ from `saved` (both `to_dict` configs). A
    field `saved` lacks (one the schema has and the saved config does not) counts at its
    default; one only `saved` has (no longer in the schema) is ignored: it cannot change the
    run."""
    a, b = _defaults() | _flat(saved), _flat(new)
    return sorted(k for k in b if a.get(k, KeyError) != b[k])


def _allowed(field: str, allowed: tuple[str, ...]) -> bool:
    return any(field == a or field.startswith(a + ".") for a in allowed)


def refused_changes(cfg: RunConfig, saved: dict) -> list[str]:
    """The changes from `saved` that neither RESUME_MAY_CHANGE nor cfg.resume_may_change allow."""
    allowed = RESUME_MAY_CHANGE + tuple(cfg.resume_may_change)
    return [f for f in config_changes(saved, to_dict(cfg)) if not _allowed(f, allowed)]


def _saved_config(run_dir: Path) -> dict | None:
    file = run_dir / CONFIG_FILE
    if not file.exists():
        return None
    try:
        saved = json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"{file} is not JSON ({e}); restore it from config_history/ or move the run "
            "directory aside and start a new run."
        ) from e
    return saved_run_config(saved, str(file))


def check_run_dir(cfg: RunConfig) -> None:
    """A new run directory, or one whose run this config may resume."""
    run_dir = Path(cfg.run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        _fail("run_dir", cfg.run_dir, "is a file; choose a directory path.")
    if not holds_run(run_dir):
        return
    if not cfg.resume:
        _fail(
            "run_dir",
            cfg.run_dir,
            "already holds a run and resume is False: pass --config.resume=True to continue it, "
            "or choose a new --config.run_dir. Nothing was written.",
        )
    saved = _saved_config(run_dir)
    if saved is None:
        return
    refused = refused_changes(cfg, saved)
    if refused:
        flat_saved, flat_new = _defaults() | _flat(saved), _flat(to_dict(cfg))
        shown = "; ".join(
            f"{f}: {flat_saved.get(f, '<absent>')!r} -> {flat_new.get(f, '<absent>')!r}"
            for f in refused[:8]
        )
        more = f" (and {len(refused) - 8} more)" if len(refused) > 8 else ""
        quoted = ", ".join(f'"{f}"' for f in refused)
        raise ConfigError(
            f"config differs from the run in {run_dir} ({run_dir / CONFIG_FILE}) in {len(refused)} "
            f"field(s): {shown}{more}. Resume with the same config, choose a new "
            f"--config.run_dir, or allow the change: --config.resume_may_change='({quoted},)'. "
            "Nothing was written."
        )


def write_config(cfg: RunConfig) -> None:
    """Writes run_dir/config.json (atomically); a different previous one goes to
    config_history/<k>.json first. Call after `check`."""
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    file = run_dir / CONFIG_FILE
    new = to_dict(cfg)
    saved = _saved_config(run_dir)
    if saved is not None and saved != new:
        history = run_dir / CONFIG_HISTORY
        history.mkdir(exist_ok=True)
        k = 1 + max((int(p.stem) for p in history.glob("*.json") if p.stem.isdigit()), default=0)
        os.replace(file, history / f"{k}.json")
        log.info(
            "resuming with a changed config (%s); the previous one is %s",
            ", ".join(config_changes(saved, new)),
            history / f"{k}.json",
        )
    tmp = run_dir / f".{CONFIG_FILE}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(new, indent=2))
    os.replace(tmp, file)
