"""Where each role's RL starts: the verifier started from the generator's SFT result
(`sft.verifier.start_from_generator`), and the field's validation."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file
from short_runs import comparable

from tango_jax.config.files import load_config_file
from tango_jax.config.run import base_config, load_run_config
from tango_jax.data import synthetic_labels
from tango_jax.data.synthetic import ArithConfig, VerifierAnalysis, VerifierLabels
from tango_jax.metrics.writer import read_metrics
from tango_jax.models.tokenizer import tiny_tokenizer
from tango_jax.parallel.mesh import make_mesh
from tango_jax.run import sft as sft_module
from tango_jax.run.sft import SFTPair, check_response_lengths, encode_examples, prepare_rl_start
from tango_jax.run.sft_progress import SFTStopped
from tango_jax.run.signals import StopSignals
from tango_jax.tango.kind import Kind

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _weights(path: Path) -> dict[str, np.ndarray]:
    out = {}
    for f in sorted(path.glob("*.safetensors")):
        out |= load_file(str(f))
    return out


def _config(run_dir: Path, *, verifier_sft: bool):
    c = load_config_file(CONFIGS / "tiny_arith.py").get_config("tango,scratch")
    c.run_dir = str(run_dir)
    c.mesh = dict(data=1, fsdp=2, tensor=4)
    for stage in (c.sft.generator, c.sft.verifier):
        stage.steps, stage.batch_size, stage.num_examples = 2, 8, 32
        stage.trainer.micro_batch_size = 8
    c.sft.verifier.enable = verifier_sft
    c.sft.verifier.trainer.optimizer.learning_rate = 1e-6  # stays next to where it started
    return load_run_config(c)


@pytest.mark.slow
def test_verifier_starts_from_the_generators_sft(tmp_path):
    cfg = _config(tmp_path, verifier_sft=False)
    mesh = make_mesh(cfg.mesh)
    assert cfg.sft.verifier.start_from_generator  # the tiny config's choice
    assert (
        prepare_rl_start(cfg, Kind.VERIFIER, tmp_path, mesh=mesh) == tmp_path / "sft" / "generator"
    )
    assert not (tmp_path / "initial" / "verifier").exists()  # its own preset is never written

    cfg = _config(tmp_path, verifier_sft=True)
    out = prepare_rl_start(cfg, Kind.VERIFIER, tmp_path, mesh=mesh)
    assert out == tmp_path / "sft" / "verifier"
    generator, verifier = _weights(tmp_path / "sft" / "generator"), _weights(out)
    assert generator.keys() == verifier.keys()
    for name in generator:  # one step at lr 1e-6 from the generator's weights
        np.testing.assert_allclose(verifier[name], generator[name], atol=1e-4, err_msg=name)
    assert any(not np.array_equal(verifier[n], generator[n]) for n in generator)


def test_only_the_verifier_can_start_from_the_generator():
    c = base_config()
    c.sft.generator.start_from_generator = True
    with pytest.raises(ValueError, match="sft.verifier.start_from_generator"):
        load_run_config(c)


def test_unlabelled_step_judgments_are_exempt_token_by_token():
    """encode_examples turns an example's no_loss character spans into a 0 on exactly the
    tokens of those characters (UNLABELLED transcripts: the K step-judgment words), 1 on the
    rest and on the EOS; examples without spans get no mask."""
    tokenizer = tiny_tokenizer()
    arith = ArithConfig(
        verifier_sft_labels=VerifierLabels.UNLABELLED,
        verifier_sft_analysis=VerifierAnalysis.COMPARE,
        verifier_sft_one_step=0.3,
    )
    examples = synthetic_labels.verifier_sft_examples(arith, 40, seed=1)
    pairs = [SFTPair(e.prompt, e.response, e.no_loss) for e in examples]
    encoded = encode_examples(pairs, tokenizer, chat_template=False)
    k_step = 0
    for e, enc in zip(examples, encoded):
        assert enc.prompt_ids == tokenizer(e.prompt, add_special_tokens=False)["input_ids"]
        assert enc.response_ids[:-1] == tokenizer(e.response, add_special_tokens=False)["input_ids"]
        assert enc.response_ids[-1] == tokenizer.eos_token_id
        if not e.no_loss:
            assert enc.loss_mask is None
            continue
        k_step += 1
        exempt = [t for t, m in zip(enc.response_ids, enc.loss_mask) if m == 0.0]
        assert tokenizer.convert_ids_to_tokens(exempt) == [e.response[a:b] for a, b in e.no_loss]
        assert enc.loss_mask[-1] == 1.0 and sum(enc.loss_mask) == len(enc.loss_mask) - len(exempt)
    assert k_step > 10
    # a span that cuts into a token exempts the whole token
    pair = SFTPair("p", "written 38", ((9, 10),))
    [enc] = encode_examples([pair], tokenizer, chat_template=False)
    tokens = tokenizer.convert_ids_to_tokens(enc.response_ids[:-1])
    assert [t for t, m in zip(tokens, enc.loss_mask) if m == 0.0] == ["8"]


def test_sft_responses_longer_than_the_rl_budget_are_named(caplog):
    """A verifier SFT whose transcripts RL cannot sample to their verdict (COMPARE analyses
    are ~140 tokens, the tiny config's verifier max_tokens is 128) is reported with the field
    and the length to set."""
    tokenizer = tiny_tokenizer()
    arith = ArithConfig(
        verifier_sft_labels=VerifierLabels.UNLABELLED,
        verifier_sft_analysis=VerifierAnalysis.COMPARE,
    )
    examples = synthetic_labels.verifier_sft_examples(arith, 20, seed=1)
    encoded = encode_examples(
        [SFTPair(e.prompt, e.response, e.no_loss) for e in examples],
        tokenizer,
        chat_template=False,
    )
    longest = max(len(e.response_ids) for e in encoded)
    with caplog.at_level("WARNING"):
        check_response_lengths("verifier", encoded, longest)
    assert not caplog.records
    with caplog.at_level("WARNING"):
        check_response_lengths("verifier", encoded, 128)
    [record] = caplog.records
    assert "verifier.rollout.max_tokens (128)" in record.getMessage()
    assert f"at least {longest}" in record.getMessage()


@pytest.mark.slow
def test_a_signal_during_sft_saves_it_and_the_relaunch_continues_it(tmp_path):
    """SIGTERM arrives before the generator's 3-step SFT starts: the stage runs step 1, saves
    its progress and stops (SFTStopped); the relaunch continues from step 2 and ends with the
    uninterrupted stage's weights and metric lines, bit for bit, and removes the progress."""
    cfg = _config(tmp_path / "a", verifier_sft=False)
    cfg = dataclasses.replace(
        cfg,
        sft=dataclasses.replace(cfg.sft, generator=dataclasses.replace(cfg.sft.generator, steps=3)),
    )
    mesh = make_mesh(cfg.mesh)
    whole = prepare_rl_start(cfg, Kind.GENERATOR, tmp_path / "a", mesh=mesh)

    run_dir = tmp_path / "b"
    cfg_b = dataclasses.replace(cfg, run_dir=str(run_dir))
    with StopSignals() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        with pytest.raises(SFTStopped, match="SIGTERM.*after SFT step 1 of the generator"):
            prepare_rl_start(cfg_b, Kind.GENERATOR, run_dir, mesh=mesh, stop=stop)
    assert not (run_dir / "sft" / "generator").exists()
    assert [p.name for p in (run_dir / "sft_checkpoints" / "generator").iterdir()] == ["1"]
    with StopSignals() as stop:
        resumed = prepare_rl_start(cfg_b, Kind.GENERATOR, run_dir, mesh=mesh, stop=stop)
    a, b = _weights(whole), _weights(resumed)
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    rows_a = read_metrics(tmp_path / "a" / "sft_logs" / "generator")
    rows_b = read_metrics(run_dir / "sft_logs" / "generator")
    assert [r["step"] for r in rows_b] == [1, 2, 3]
    assert comparable(rows_b) == comparable(rows_a)
    assert not (run_dir / "sft_checkpoints" / "generator").exists()


def _verdict_pair(verdict: str) -> SFTPair:
    return SFTPair("q", f"<final_verification>\\boxed{{{verdict}}}</final_verification>")


def test_balanced_verdicts_give_every_batch_half_of_each():
    """Three CORRECT examples against nine INCORRECT: drawn at random a batch of 8 has 2 CORRECT
    on average, and many batches have none or 1; balanced, every batch has 4 of each."""
    examples = [_verdict_pair("CORRECT")] * 3 + [_verdict_pair("INCORRECT")] * 9
    rng = np.random.default_rng(0)
    draw = sft_module._balanced_draw("verifier", examples)
    for _ in range(20):
        rows = draw(rng, 8)
        assert all(r < 3 for r in rows[:4]) and all(r >= 3 for r in rows[4:])
    plain = sft_module._draw(len(examples))
    counts = [int((plain(rng, 8) < 3).sum()) for _ in range(200)]
    assert min(counts) <= 1 and np.mean(counts) == pytest.approx(2.0, abs=0.3)
    odd = draw(rng, 5)  # the odd row is INCORRECT
    assert (odd < 3).sum() == 2 and (odd >= 3).sum() == 3


def test_balanced_verdicts_need_both_verdicts_and_only_the_verifier():
    with pytest.raises(ValueError, match=r"1 examples whose verdict is CORRECT and 0 INCORRECT"):
        sft_module._balanced_draw("verifier", [_verdict_pair("CORRECT")])
    c = base_config()
    c.sft.generator.balance_verdicts = True
    with pytest.raises(ValueError, match="sft.verifier.balance_verdicts"):
        load_run_config(c)
