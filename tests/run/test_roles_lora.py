"""A role with `lora.init_from` starts from that PEFT adapter, and its KL reference is the
policy it starts from (those adapters over the frozen base), not the bare base."""

from __future__ import annotations

import dataclasses
import shutil

import jax
import numpy as np
from flax import nnx
from hf_fixtures import VARIANTS, write_hf_checkpoint

from tango_jax.config.roles import RoleConfig
from tango_jax.models import from_pretrained
from tango_jax.models.lora import LoraConfig
from tango_jax.models.peft import save_peft_adapter
from tango_jax.models.tokenizer import TINY_TOKENIZER_DIR
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.run.roles import build_role
from tango_jax.tango.kind import Kind


def test_a_role_starts_from_a_peft_adapter_which_is_its_kl_reference(tmp_path):
    base = write_hf_checkpoint(tmp_path / "base", **VARIANTS["llama_tied_plain"])
    shutil.copytree(TINY_TOKENIZER_DIR, base, dirs_exist_ok=True)  # build_role loads one
    lora = LoraConfig(rank=2, alpha=4.0, targets=("q_proj", "down_proj"))
    donor = from_pretrained(base, lora=lora)
    moved = jax.tree.map(lambda x: x + 0.5, nnx.state(donor, nnx.LoRAParam))
    nnx.update(donor, moved)
    adapter = save_peft_adapter(donor, tmp_path / "adapter")
    cfg = RoleConfig(dtype="float32", remat=False)
    assert cfg.trainer.loss.kl_coef > 0  # the default: the trainer holds a reference
    cfg = dataclasses.replace(cfg, lora=dataclasses.replace(lora, init_from=str(adapter)))
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    role = build_role(Kind.GENERATOR, cfg, base, mesh, with_trainer=True)
    want = [np.asarray(x) for x in jax.tree.leaves(moved)]
    for got in (role.trainer.params, role.trainer.ref_params):
        for a, b in zip(jax.tree.leaves(got), want, strict=True):
            np.testing.assert_array_equal(np.asarray(a), b)
    live, ref = jax.tree.leaves(role.trainer.params), jax.tree.leaves(role.trainer.ref_params)
    assert all(a is not b for a, b in zip(live, ref))  # the step donates the live buffers
