"""The verifier's own prompt stream (`data.verifier_stream`): a Tango run's generator steps
then take exactly the batches a GRPO run of the same data seed takes; off (the paper's code,
the default), the verifier's warm-up and steps take batches from the same stream."""

from __future__ import annotations

import dataclasses

from short_runs import short_config

from tango_jax.data.datasets import Problem, PromptStream, StreamPosition
from tango_jax.parallel.mesh import make_mesh
from tango_jax.run.host_state import HostState
from tango_jax.run.loop import TangoLoop
from tango_jax.run.prompt_streams import VERIFIER_SEED_OFFSET, PhaseStreams
from tango_jax.tango.kind import Kind
from tango_jax.tango.schedule import Phase, Schedule

PROBLEMS = [Problem(f"q{i}", "1", "toy", str(i)) for i in range(12)]


def _ids(batch) -> list[str]:
    return [p.id for p in batch]


def _generator_batches(streams: PhaseStreams, schedule: Schedule) -> list[list[str]]:
    """The batches of the generator's steps, drawn as the loop draws every step's batch."""
    out = []
    for step in range(1, schedule.total_steps + 1):
        phase = schedule.phase(step)
        batch = _ids(streams.for_phase(phase).next_batch())
        if phase.kind is Kind.GENERATOR:
            out.append(batch)
    return out


def test_an_own_stream_gives_the_generator_the_grpo_runs_batches():
    tango = Schedule(total_steps=10, verifier_warmup_steps=2)  # V V G G G V G G G V
    grpo = Schedule(total_steps=6, verifier_warmup_steps=0, verifier_trainable=False)
    plain = PhaseStreams(PromptStream(PROBLEMS, 2, seed=1))
    grpo_batches = _generator_batches(plain, grpo)
    own = PhaseStreams(PromptStream(PROBLEMS, 2, seed=1), PromptStream(PROBLEMS, 2, seed=8))
    assert _generator_batches(own, tango) == grpo_batches
    shared = PhaseStreams(PromptStream(PROBLEMS, 2, seed=1))
    shared_batches = _generator_batches(shared, tango)
    assert shared_batches != grpo_batches
    assert shared_batches[:3] == grpo_batches[2:5]  # the warm-up took batches 0 and 1
    assert own.positions()[1] == StreamPosition(8, 0, 4)  # the verifier's 4 batches
    assert shared.positions()[1] is None


def test_host_state_keeps_the_verifier_stream_and_reads_old_checkpoints():
    state = HostState(5, data=StreamPosition(1, 0, 3), verifier_data=StreamPosition(7920, 1, 2))
    assert HostState.from_dict(state.to_dict()) == state
    old = {k: v for k, v in state.to_dict().items() if k != "verifier_data"}
    assert HostState.from_dict(old).verifier_data is None


def test_the_loop_builds_the_verifier_stream_from_its_own_seed_and_position(tmp_path):
    cfg = short_config(tmp_path / "a", scratch=False)
    own = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, verifier_stream=True))
    loop = TangoLoop(own, make_mesh(own.mesh))
    streams, _ = loop._data(None)
    seed = cfg.data.seed
    assert streams.generator.position.seed == seed
    assert streams.verifier.position.seed == seed + VERIFIER_SEED_OFFSET
    host = HostState(3, data=StreamPosition(seed, 0, 2),
                     verifier_data=StreamPosition(seed + VERIFIER_SEED_OFFSET, 0, 1))  # fmt: skip
    streams, _ = loop._data(host)
    assert streams.positions() == (host.data, host.verifier_data)
    shared, _ = TangoLoop(cfg, make_mesh(cfg.mesh))._data(None)  # the default: one stream
    assert shared.verifier is None
    assert shared.for_phase(Phase(Kind.VERIFIER, True)) is shared.generator


def test_the_verifiers_own_batch_size_leaves_the_generators_batches_alone(tmp_path):
    """`data.verifier_prompts_per_step`: the verifier's stream draws batches of that size; the
    generator's stream is the one a run without it draws."""
    cfg = short_config(tmp_path / "a", scratch=False)  # 2 prompts a step
    own = dataclasses.replace(cfg.data, verifier_stream=True)
    wide = dataclasses.replace(own, verifier_prompts_per_step=4)
    base, _ = TangoLoop(dataclasses.replace(cfg, data=own), make_mesh(cfg.mesh))._data(None)
    streams, _ = TangoLoop(dataclasses.replace(cfg, data=wide), make_mesh(cfg.mesh))._data(None)
    assert len(streams.verifier.next_batch()) == 4
    assert _ids(streams.generator.next_batch()) == _ids(base.generator.next_batch())
    assert len(base.verifier.next_batch()) == 2
