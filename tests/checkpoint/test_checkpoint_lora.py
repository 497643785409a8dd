"""Run checkpoints of a LoRA trainer (bf16 base): they hold the adapters and their optimizer
state only, a trainer restored from one takes the next step exactly as the uninterrupted one,
and `python -m tango_jax.export` writes the saved step as a PEFT adapter directory (PEFT loads
it on the base with our logits) or, with --merged, as a plain HF checkpoint."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import peft
import pytest
import torch
from flax import nnx
from hf_fixtures import TOL, load_hf, rel_err
from lora_trainer import LORA, lora_batch, lora_trainer, write_base

from tango_jax.checkpoint.run import CHECKPOINT_SUBDIR, ModelInfo, RunCheckpointer
from tango_jax.export import main as export_main
from tango_jax.models.tokenizer import TINY_TOKENIZER_DIR

TOKENS = np.arange(2, 12)[None]


def _host(tree) -> list[np.ndarray]:
    return [np.array(x) for x in jax.tree.leaves(tree)]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(run dir, base dir, logits after step 1, state after step 2 uninterrupted, its
    metrics): one step, a checkpoint, then a second step."""
    root = tmp_path_factory.mktemp("lora_run")
    base = write_base(root / "base")
    trainer = lora_trainer(base)
    info = ModelInfo.from_model(trainer.model, TINY_TOKENIZER_DIR, base_dir=base)
    ckpt = RunCheckpointer(root / "run" / CHECKPOINT_SUBDIR, keep=2, models={"generator": info})
    trainer.step(lora_batch(1))
    logits = np.asarray(nnx.jit(lambda m, t: m(t))(trainer.model, jnp.asarray(TOKENS)))
    ckpt.save(1, {"generator": trainer.state_dict()}, {})
    ckpt.close()
    metrics, _ = trainer.step(lora_batch(2))
    return root / "run", base, logits, _host((trainer.params, trainer.opt_state)), metrics


def test_checkpoint_holds_adapters_and_resume_is_exact(run):
    run_dir, base, _, uninterrupted, metrics = run
    meta = json.loads(
        (run_dir / CHECKPOINT_SUBDIR / "1" / "generator_params" / "_METADATA").read_text()
    )
    keys = list(meta["tree_metadata"])
    assert keys and all("adapters" in k for k in keys)  # no base weight is stored

    resumed = lora_trainer(base)
    ckpt = RunCheckpointer(run_dir / CHECKPOINT_SUBDIR, keep=2, read_only=True)
    try:
        states, _ = ckpt.restore(None, {"generator": resumed.state_dict()})
    finally:
        ckpt.close()
    resumed.load_state_dict(states["generator"])
    again, _ = resumed.step(lora_batch(2))
    assert {k: again[k] for k in metrics if k != "lr"} == {
        k: metrics[k] for k in metrics if k != "lr"
    }
    for got, want in zip(_host((resumed.params, resumed.opt_state)), uninterrupted):
        np.testing.assert_array_equal(got, want)


def test_export_writes_a_peft_adapter_and_on_request_the_merged_model(run, tmp_path):
    run_dir, base, logits, _, _ = run
    adapter = export_main(
        ["--run_dir", str(run_dir), "--role", "generator", "--out", str(tmp_path / "a")]
    )
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"]) == (LORA.rank, LORA.alpha)
    merged = export_main(  # float32: the bfloat16 base's own dtype would round the merge
        [
            *("--run_dir", str(run_dir), "--role", "generator", "--out", str(tmp_path / "m")),
            *("--merged", "--dtype", "float32"),
        ]
    )
    tokens = torch.tensor(TOKENS)
    with torch.no_grad():
        via_peft = peft.PeftModel.from_pretrained(load_hf(base), adapter).eval()(tokens)
        via_merged = load_hf(merged)(tokens)
        plain = load_hf(base)(tokens)
    assert rel_err(via_peft.logits.numpy(), logits) <= TOL
    assert rel_err(via_merged.logits.numpy(), logits) <= TOL
    assert rel_err(plain.logits.numpy(), logits) > 100 * TOL  # the step moved the adapters
