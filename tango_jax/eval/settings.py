"""What `python -m tango_jax.evaluate` runs with besides the weights: the roles' sampling
settings, the prompt templates, the mesh, the answer check's workers and the own-data defaults,
read from `--config` (a training config file), else the run's config.json, else RunConfig's
defaults; then its flags override them."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import Any

from tango_jax.config.files import config_from_spec
from tango_jax.config.roles import RoleConfig, SamplerBackend
from tango_jax.config.run import RunConfig, load_run_config, load_saved_run_config
from tango_jax.data.prompts import DataConfig
from tango_jax.parallel.mesh import MeshConfig
from tango_jax.text.template_files import TemplateFiles, load_templates
from tango_jax.text.templates import PromptStyle, PromptTemplates

SAMPLED_N = 4  # --data's samples per problem when the run's config does not sample its evals


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the evaluation runs with, besides the model weights."""

    generator: RoleConfig
    verifier: RoleConfig
    prompt_style: PromptStyle
    template_files: TemplateFiles  # the user's templates (data.template_files), if any
    templates: PromptTemplates  # what the prompts are rendered with
    mesh: MeshConfig
    scorer_workers: int
    scorer_timeout_s: float
    data: DataConfig  # the run's data fields and reward (--data's defaults)
    sampled_n: int  # samples per problem for --data's sampled pass@1 (0: greedy only)
    seed: int  # their sampling seed


def _config(args: argparse.Namespace) -> RunConfig | None:
    """--config's RunConfig, else the run's config.json's, else None."""
    if args.config:
        try:
            return load_run_config(config_from_spec(args.config))
        except FileNotFoundError as e:
            raise FileNotFoundError(f"--config {args.config}: {e}") from None
    saved = Path(args.run_dir) / "config.json" if args.run_dir else None
    if saved is not None and saved.is_file():
        return load_saved_run_config(saved)
    return None


def load_settings(args: argparse.Namespace) -> Settings:
    """Settings from --config, else run_dir/config.json, else the defaults; then the flags."""
    cfg = _config(args)
    if cfg is not None:
        gen, ver = cfg.generator, cfg.verifier
        style, files, mesh = cfg.data.prompt_style, cfg.data.template_files, cfg.mesh
        workers, timeout_s = cfg.scorer_workers, cfg.scorer_timeout_s
        data, seed = cfg.data, cfg.seed
        sampled_n = cfg.eval.sampled_n if cfg.eval.sampled else SAMPLED_N
    else:  # RunConfig's field defaults (no model set, so not a validated run)
        d = {f.name: f.default for f in dataclasses.fields(RunConfig)}
        gen, ver, style, mesh = d["generator"], d["verifier"], PromptStyle.FULL, MeshConfig()
        files = TemplateFiles()
        workers, timeout_s = d["scorer_workers"], d["scorer_timeout_s"]
        data, seed, sampled_n = d["data"], d["seed"], SAMPLED_N
    gen, ver = (_override(r, args) for r in (gen, ver))
    style = PromptStyle(args.prompt_style) if args.prompt_style else style
    workers = args.scorer_workers or min(workers, os.cpu_count() or 1)
    templates = load_templates(style, files)
    sampled_n = sampled_n if args.sampled_n is None else args.sampled_n
    seed = seed if args.seed is None else args.seed
    return Settings(
        gen, ver, style, files, templates, mesh, workers, timeout_s, data, sampled_n, seed
    )


def _override(role: RoleConfig, args: argparse.Namespace) -> RoleConfig:
    changes: dict[str, Any] = {}
    if args.backend:
        changes["sampler"] = dataclasses.replace(role.sampler, backend=SamplerBackend(args.backend))
    if args.max_tokens:
        changes["eval_max_tokens"] = args.max_tokens
    if args.dtype:
        changes["dtype"] = args.dtype
    return dataclasses.replace(role, **changes)
