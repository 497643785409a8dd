"""Run checkpoints: exact resume, shardings, keep-k, crash mid-save, non-finite stop, HF export."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from hf_fixtures import TOL, rel_err
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tango_jax.checkpoint.guards import NonFiniteError
from tango_jax.checkpoint.run import CHECKPOINT_SUBDIR, ModelInfo, RunCheckpointer, check_finite
from tango_jax.export import main as export_main
from tango_jax.models import Transformer, presets
from tango_jax.models.tokenizer import TINY_TOKENIZER_DIR
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.rl.batch import make_batch
from tango_jax.rl.train_step import LossConfig, LRSchedule, OptimizerConfig, TrainerConfig
from tango_jax.rl.trainer import Trainer

CONFIG = presets.get("tiny-qwen2", vocab_size=64, embed_dim=64, mlp_dim=96)
# A warm-up + cosine schedule, so the restored optimizer count (schedule position) matters.
TRAIN = TrainerConfig(
    optimizer=OptimizerConfig(
        learning_rate=1e-3, schedule=LRSchedule.COSINE, warmup_ratio=0.25, total_steps=8
    ),
    loss=LossConfig(kl_coef=0.0),
    micro_batch_size=4,
)
ROLES = ("generator", "verifier")


def _batch(seed: int):
    """8 rows, always padded to [8, 8 + 8] so the train step compiles once per trainer."""
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(2, 64, size=rng.integers(2, 9)).tolist() for _ in range(8)]
    responses = [rng.integers(2, 64, size=rng.integers(1, 9)).tolist() for _ in range(8)]
    adv = rng.normal(size=8).tolist()
    return make_batch(prompts, responses, advantages=adv, prompt_bucket=8, response_bucket=8)


def _mesh1():
    return make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])


def _trainer(seed: int, mesh=None) -> Trainer:
    model = Transformer(CONFIG, rngs=nnx.Rngs(seed))
    return Trainer(model, TRAIN, mesh=mesh or _mesh1())


def _host(tree) -> list[np.ndarray]:
    return [np.array(x) for x in jax.tree.leaves(tree)]


def _models() -> dict[str, ModelInfo]:
    info = ModelInfo.from_model(Transformer(CONFIG, rngs=nnx.Rngs(0)), TINY_TOKENIZER_DIR)
    return dict.fromkeys(ROLES, info)


HOST_STATE = {
    "schedule": {"phase_index": 3, "alpha": 0.25},
    "class_balance": {"pos_ema": 1.5, "neg_ema": 2.5, "initialized": True},
    "data": {"epoch": 0, "position": 12},
    "rng": {"seed": 7, "key": [0, 42]},
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A 'training run': generator steps, checkpoint 1, three more steps, checkpoint 2.

    The verifier is checkpointed beside it but not stepped (one compiled step per trainer is
    what these tests can afford; its state round trip is checked bit for bit).
    """
    run_dir = tmp_path_factory.mktemp("run")
    trainers = {"generator": _trainer(0), "verifier": _trainer(1)}
    gen = trainers["generator"]
    ckpt = RunCheckpointer(run_dir / CHECKPOINT_SUBDIR, keep=3, models=_models())
    gen.step(_batch(1))
    gen.step(_batch(2))
    tokens = jnp.asarray(np.arange(2, 12)[None])
    at_step1 = types.SimpleNamespace(
        state={r: _host((t.params, t.opt_state)) for r, t in trainers.items()},
        logits=np.asarray(gen.model(tokens)),
        tokens=np.asarray(tokens),
    )
    ckpt.save(1, {r: t.state_dict() for r, t in trainers.items()}, HOST_STATE)
    # The next steps donate the parameter buffers while the save may still be writing.
    seeds = (3, 4, 5)
    after = [gen.step(_batch(seed))[0] for seed in seeds]
    final = _host(gen.params)
    ckpt.save(2, {r: t.state_dict() for r, t in trainers.items()}, HOST_STATE | {"k": 2})
    ckpt.close()
    return types.SimpleNamespace(
        dir=run_dir, trainers=trainers, at_step1=at_step1, seeds=seeds, after=after, final=final
    )


def test_resume_continues_bit_identically(run):
    """Restore step 1 into new trainers (other inits: the restore must win), then replay the
    next steps. The replay runs in the run's own generator object, whose step is already
    compiled, with the restored state loaded: every array it starts from is a restored one."""
    ckpt = RunCheckpointer(run.dir / CHECKPOINT_SUBDIR, keep=3, read_only=True)
    fresh = {"generator": _trainer(10), "verifier": _trainer(11)}
    targets = {r: t.state_dict() for r, t in fresh.items()}
    restored, host_state = ckpt.restore(1, targets)
    assert host_state == HOST_STATE
    for role, trainer in fresh.items():
        state = restored[role]
        assert state["step"] == (2 if role == "generator" else 0)
        for got, want in zip(
            _host((state["params"], state["opt_state"])), run.at_step1.state[role]
        ):
            np.testing.assert_array_equal(got, want)
        for got, live in zip(jax.tree.leaves(state["params"]), jax.tree.leaves(trainer.params)):
            assert got.sharding == live.sharding
        trainer.load_state_dict(state)
    gen = run.trainers["generator"]
    gen.load_state_dict(fresh["generator"].state_dict())
    replay = [gen.step(_batch(seed))[0] for seed in run.seeds]
    assert replay == run.after  # every metric, exactly (loss, grad norm, lr from the schedule, ...)
    for got, want in zip(_host(gen.params), run.final):
        np.testing.assert_array_equal(got, want)
    assert ckpt.latest_step() == 2 and ckpt.restore(None, targets)[1]["k"] == 2


def test_export_any_saved_step_matches_transformers(run, tmp_path):
    out = export_main(
        [
            "--run_dir",
            str(run.dir),
            "--step",
            "1",
            "--role",
            "generator",
            "--out",
            str(tmp_path / "g1"),
        ]
    )
    assert (out / "tokenizer.json").exists() and (out / "config.json").exists()
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(out, local_files_only=True, dtype=torch.float32)
    with torch.no_grad():
        logits = hf(torch.tensor(run.at_step1.tokens)).logits.numpy()
    assert rel_err(run.at_step1.logits, logits) <= TOL


def test_nonfinite_step_stops_with_the_last_good_checkpoint_intact(run):
    gen = run.trainers["generator"]
    before = _host(gen.params)
    batch = _batch(6)
    bad = dataclasses.replace(batch, advantages=np.full_like(batch.advantages, np.nan))
    metrics, _ = gen.step(bad)
    ckpt = RunCheckpointer(run.dir / CHECKPOINT_SUBDIR, keep=3, read_only=True)
    with pytest.raises(NonFiniteError) as info:
        check_finite(metrics, role="generator", step=7, checkpointer=ckpt)
    msg = str(info.value)
    assert msg.startswith("generator step 7: non-finite ") and "loss=nan" in msg
    assert "The update was rejected and the run stops" in msg
    assert f"last good checkpoint is step 2 in {ckpt.directory} and is untouched" in msg
    for got, want in zip(_host(gen.params), before):  # the update was rejected
        np.testing.assert_array_equal(got, want)
    assert ckpt.all_steps() == [1, 2]
    check_finite(
        {"loss": 0.1, "grad_norm": 1.0, "nonfinite": 0.0}, role="v", step=1, checkpointer=ckpt
    )


def test_restore_keeps_shardings_and_reshards_to_another_mesh(tmp_path):
    mesh_a = make_mesh(MeshConfig(2, 2, 2))
    saver = _trainer(0, mesh_a)
    # Non-trivial optimizer moments without compiling a train step on 8 devices.
    noise = lambda x: x + jnp.full_like(x, 0.5) if x.ndim else x + 3
    saver.opt_state = jax.tree.map(noise, saver.opt_state)
    saved = _host((saver.params, saver.opt_state))
    info = dict.fromkeys(["generator"], ModelInfo.from_model(saver.model))
    with RunCheckpointer(tmp_path, keep=1, models=info) as ckpt:
        ckpt.save(1, {"generator": saver.state_dict()}, {})
    specs = {x.sharding.spec for x in jax.tree.leaves(saver.params)}
    assert len(specs) > 2  # fsdp- and tensor-sharded params, not everything replicated

    ckpt = RunCheckpointer(tmp_path, keep=1, read_only=True)
    state = {k: saver.state_dict()[k] for k in ("params", "opt_state")}
    mesh_b = make_mesh(MeshConfig(1, 8, 1))  # fsdp 2 -> 8, tensor 2 -> 1
    one = jax.sharding.SingleDeviceSharding(jax.devices()[3])
    for where in ("same mesh", "other mesh", "one device"):

        def abstract(x, where=where):
            sharding = {
                "same mesh": x.sharding,
                "other mesh": NamedSharding(mesh_b, x.sharding.spec),
                "one device": one,
            }[where]
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)

        target = jax.tree.map(abstract, state)
        restored = ckpt.restore(1, {"generator": target})[0]["generator"]
        assert restored["step"] == 0
        got_leaves = jax.tree.leaves((restored["params"], restored["opt_state"]))
        want_leaves = jax.tree.leaves((target["params"], target["opt_state"]))
        for got, want, value in zip(got_leaves, want_leaves, saved, strict=True):
            assert got.sharding == want.sharding, where
            np.testing.assert_array_equal(np.asarray(got), value, err_msg=where)
    params = ckpt.restore_params(1, "generator", target["params"])
    assert all(x.sharding == one for x in jax.tree.leaves(params))


# --- small array trees (no model) for the file-level behaviour -----------------------------------


def _state(step: int, scale: float = 1.0) -> dict:
    rep = NamedSharding(make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1]), P())
    return {
        "params": {"w": jax.device_put(scale * jnp.arange(6.0).reshape(2, 3), rep)},
        "opt_state": (jax.device_put(jnp.asarray(step, jnp.int32), rep),),
        "step": step,
    }


def _info() -> dict[str, ModelInfo]:
    return {"generator": ModelInfo({"model_type": "qwen2"})}


def test_keeps_the_last_k_steps(tmp_path):
    with RunCheckpointer(tmp_path, keep=2, models=_info()) as ckpt:
        for step in range(1, 5):
            ckpt.save(step, {"generator": _state(step)}, {"step": step})
        ckpt.wait_until_finished()
        assert ckpt.all_steps() == [3, 4]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["3", "4"]


def test_time_and_signal_checkpoints_leave_the_keep_policy_to_scheduled_steps(tmp_path):
    """Steps 2, 4, 6 are scheduled (every_steps=2); 3 and 5 are time or signal checkpoints: each
    is kept only while it is the newest, and `keep` counts the scheduled ones."""
    scheduled = lambda s: s % 2 == 0
    seen = []
    with RunCheckpointer(tmp_path, keep=2, models=_info(), scheduled=scheduled) as ckpt:
        for step in range(2, 8):
            ckpt.save(step, {"generator": _state(step)}, {"step": step})
            ckpt.wait_until_finished()
            seen.append(ckpt.all_steps())
    assert seen == [[2], [2, 3], [2, 4], [2, 4, 5], [4, 6], [4, 6, 7]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["4", "6", "7"]


# A writer that dies after every item of step 2 is written but before the step is committed
# (its temporary directory renamed): the hardest moment for a crash. Self-contained, so the
# subprocess imports only JAX and the checkpoint module.
CRASH = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    import jax.numpy as jnp
    from orbax.checkpoint._src.path import atomicity
    from tango_jax.checkpoint.run import ModelInfo, RunCheckpointer

    def state(step, scale):
        w = scale * jnp.arange(6.0).reshape(2, 3)
        return {"params": {"w": w}, "opt_state": (jnp.asarray(step, jnp.int32),), "step": step}

    directory = Path(sys.argv[1])
    ckpt = RunCheckpointer(directory, keep=3, models={"generator": ModelInfo({})})
    ckpt.save(1, {"generator": state(1, 1.0)}, {"step": 1})
    ckpt.wait_until_finished()
    finalize = atomicity.AtomicRenameTemporaryPath.finalize

    async def die_before_the_step_rename(self, *args, **kwargs):
        if Path(str(self.get())).parent == directory:
            os._exit(17)
        return await finalize(self, *args, **kwargs)

    atomicity.AtomicRenameTemporaryPath.finalize = die_before_the_step_rename
    ckpt.save(2, {"generator": state(2, -1.0)}, {"step": 2})
    ckpt.wait_until_finished()
    """
)


def test_a_crash_mid_save_leaves_the_previous_checkpoint_valid(tmp_path):
    repo = Path(__file__).resolve().parents[2]
    env = os.environ | {"PYTHONPATH": str(repo)}
    proc = subprocess.run(
        [sys.executable, "-c", CRASH, str(tmp_path)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 17, proc.stderr[-2000:]
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "1"]
    assert len(leftovers) == 1 and leftovers[0].startswith("2.orbax-checkpoint-tmp")
    assert {p.name for p in (tmp_path / leftovers[0]).iterdir()} >= {
        "generator_params",
        "generator_opt_state",
        "host",
    }  # all data of step 2 is there, only the commit is missing

    reader = RunCheckpointer(tmp_path, keep=3, read_only=True)  # e.g. an export beside the run
    assert reader.all_steps() == [1] and (tmp_path / leftovers[0]).exists()
    with RunCheckpointer(tmp_path, keep=3, models=_info()) as ckpt:  # the resumed run
        trainers, host_state = ckpt.restore(None, {"generator": _state(0, scale=0.0)})
        assert host_state == {"step": 1} and trainers["generator"]["step"] == 1
        np.testing.assert_array_equal(
            trainers["generator"]["params"]["w"], _state(1)["params"]["w"]
        )
        ckpt.save(2, {"generator": _state(2)}, {"step": 2})  # the writer cleaned up first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1", "2"]


def test_errors_name_the_problem(tmp_path):
    with RunCheckpointer(tmp_path, keep=2, models=_info()) as ckpt:
        with pytest.raises(ValueError, match="host_state is not strict JSON"):
            ckpt.save(1, {"generator": _state(1)}, {"ema": float("nan")})
        with pytest.raises(ValueError, match="tuples become lists"):
            ckpt.save(1, {"generator": _state(1)}, {"seeds": (1, 2)})
        with pytest.raises(ValueError, match=r"no ModelInfo for roles \['verifier'\]"):
            ckpt.save(1, {"generator": _state(1), "verifier": _state(1)}, {})
        ckpt.save(1, {"generator": _state(1)}, {})
        ckpt.wait_until_finished()
        with pytest.raises(ValueError, match="step 1 is already saved"):
            ckpt.save(1, {"generator": _state(1)}, {})
        with pytest.raises(
            FileNotFoundError, match=r"step 5 is not a finalised checkpoint; saved steps are \[1\]"
        ):
            ckpt.restore(5, {"generator": _state(0)})
        with pytest.raises(
            ValueError, match=r"roles \['verifier'\] but step 1 holds \['generator'\]"
        ):
            ckpt.restore(1, {"verifier": _state(0)})
        wide = _state(0) | {"params": {"w": jnp.zeros((2, 4))}}
        with pytest.raises(ValueError, match=r"generator_params: w is stored as \(2, 3\) float32"):
            ckpt.restore(1, {"generator": wide})
        host_numpy = _state(0) | {"params": {"w": np.zeros((2, 3), np.float32)}}
        with pytest.raises(TypeError, match="without a sharding"):
            ckpt.restore(1, {"generator": host_numpy})
    with pytest.raises(ValueError, match="opened read_only"):
        RunCheckpointer(tmp_path, keep=2, read_only=True).save(2, {}, {})
    with pytest.raises(FileNotFoundError, match="no such checkpoint directory"):
        RunCheckpointer(tmp_path / "missing", keep=2, read_only=True)
