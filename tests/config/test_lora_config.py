"""`<role>.lora`: off by default, set per role; a LoRA config that names no projection of the
model refused at load, and a PEFT adapter to start from that does not fit refused by the
pre-run checks, each in one line naming the field, the value and the fix."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tango_jax.config.files import load_config_file
from tango_jax.config.preflight import check_lora_start
from tango_jax.config.roles import RoleConfig, SamplerBackend, SamplerSettings
from tango_jax.config.run import load_run_config
from tango_jax.models.lora import PROJECTIONS, LoraConfig
from tango_jax.models.peft import ADAPTER_CONFIG, ADAPTER_WEIGHTS, peft_config
from tango_jax.schema import ConfigError, to_dict

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _tiny() -> dict:
    c = load_config_file(CONFIGS / "tiny_arith.py").get_config()
    c.run_dir = "/tmp/never-written"
    return to_dict(load_run_config(c))


def test_lora_is_off_by_default_and_set_per_role():
    d = _tiny()
    assert d["generator"]["lora"]["rank"] == d["verifier"]["lora"]["rank"] == 0
    d["verifier"]["lora"] |= dict(rank=8, alpha=16.0, targets=["q_proj", "v_proj"])
    cfg = load_run_config(d)
    assert not cfg.generator.lora.enabled
    assert cfg.verifier.lora.targets == ("q_proj", "v_proj") and cfg.verifier.lora.scale == 2.0
    assert set(cfg.generator.lora.targets) == set(PROJECTIONS)  # every projection by default


@pytest.mark.parametrize(
    "field, value, message",
    [
        (
            "targets",
            ["c_attn"],  # GPT-2's name: no module of a Qwen or Llama model
            r"config.generator.lora.targets \(\('c_attn',\)\) must name projections of the "
            r"model: some of \['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', "
            r"'down_proj'\]",
        ),
        ("targets", ["q_proj", "qproj"], r"lora.targets \(\('q_proj', 'qproj'\)\) must name"),
        ("targets", [], r"lora.targets \(\(\)\) must name projections"),
        ("rank", -1, r"config.generator.lora.rank \(-1\) must be >= 0 \(0: LoRA off\)"),
        ("dropout", 0.1, r"lora.dropout \(0.1\) must be in \[0.0, 0.0\]"),
    ],
)
def test_a_lora_config_naming_no_projection_is_refused_in_one_line(field, value, message):
    d = _tiny()
    d["generator"]["lora"] |= {"rank": 4, field: value}
    with pytest.raises(ConfigError, match=message) as info:
        load_run_config(d)
    assert "\n" not in str(info.value)


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    """A PEFT adapter directory of rank 2, alpha 4, on q_proj and v_proj (its config; the
    pre-run check reads no tensor)."""
    lora = LoraConfig(rank=2, alpha=4.0, targets=("q_proj", "v_proj"))
    path = tmp_path_factory.mktemp("peft")
    (path / ADAPTER_CONFIG).write_text(json.dumps(peft_config(lora)))
    (path / ADAPTER_WEIGHTS).write_bytes(b"tensors")
    return path, lora


def test_a_peft_adapter_to_start_from_is_checked_before_the_run(adapter, tmp_path):
    path, lora = adapter
    role = RoleConfig(lora=dataclasses.replace(lora, init_from=str(path)))
    check_lora_start("generator", role)  # matches: accepted
    cases = [
        (dataclasses.replace(role.lora, rank=4), r"holds an adapter of rank 2, alpha 4.0, "),
        (dataclasses.replace(role.lora, targets=("q_proj",)), r"set generator.lora.rank, alpha"),
        (dataclasses.replace(role.lora, init_from=str(tmp_path)), r"cannot be used: .* does not"),
    ]
    for bad, message in cases:
        with pytest.raises(ConfigError, match=r"config.generator.lora.init_from \('.*" + message):
            check_lora_start("generator", dataclasses.replace(role, lora=bad))
    frozen = dataclasses.replace(
        role, trainable=False, sampler=SamplerSettings(backend=SamplerBackend.VLLM)
    )
    with pytest.raises(ConfigError, match="would not reach the vLLM server of a frozen verifier"):
        check_lora_start("verifier", frozen)


def _flat_config(name: str, variant: str) -> dict:
    """configs/<name>.py:<variant>, loaded and validated, as {"a.b.c": value}."""

    def flat(d, prefix=""):
        out = {}
        for k, v in d.items():
            out |= flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v}
        return out

    module = load_config_file(CONFIGS / f"{name}.py")
    return flat(to_dict(load_run_config(module.get_config(variant))))


def test_the_tiny_configs_lora_variant_is_tango_with_adapters_on_both_roles():
    """configs/tiny_arith.py:lora differs from :tango only in each role's adapters and lr (and
    its name and run directory)."""
    a, b = (_flat_config("tiny_arith", v) for v in ("tango", "lora"))
    changed = {k for k in a if a[k] != b[k]}
    roles = ("generator", "verifier")
    assert changed == {"name", "run_dir"} | {
        f"{r}.{f}" for r in roles for f in ("lora.rank", "trainer.optimizer.learning_rate")
    }
    assert [b[f"{r}.lora.rank"] for r in roles] == [8, 8] and b["name"] == "tiny_arith_lora"
    assert [b[f"{r}.lora.alpha"] for r in roles] == [16.0, 16.0]


def test_the_7b_configs_lora_variant_is_the_paper_setting_with_adapters_on_both_roles():
    """configs/tango_qwen2_5_math_7b.py:lora differs from the plain config only in each role's
    adapters (rank 64, alpha 128, all seven projections), its bfloat16 base and its lr (and its
    name and run directory), the setting planned in docs/scaling.md; an unknown variant is
    refused in one line naming it and the choices."""
    a, b = (_flat_config("tango_qwen2_5_math_7b", v) for v in ("", "lora"))
    roles = ("generator", "verifier")
    fields = ("lora.rank", "lora.alpha", "param_dtype", "trainer.optimizer.learning_rate")
    assert {k for k in a if a[k] != b[k]} == {"name", "run_dir"} | {
        f"{r}.{f}" for r in roles for f in fields
    }
    for r in roles:
        assert (b[f"{r}.lora.rank"], b[f"{r}.lora.alpha"]) == (64, 128.0)
        assert (
            tuple(b[f"{r}.lora.targets"]) == tuple(PROJECTIONS)
            and b[f"{r}.param_dtype"] == "bfloat16"
        )
    assert b["name"] == "tango_qwen2_5_math_7b_lora"
    module = load_config_file(CONFIGS / "tango_qwen2_5_math_7b.py")
    with pytest.raises(
        ValueError, match=r"^unknown variant 'lroa'; choose one of \('', 'lora'\)\.$"
    ):
        module.get_config("lroa")
