"""The embedded JAX sampler against transformers' generate and the model's own distribution."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hf_fixtures import load_hf, write_hf_checkpoint

from tango_jax.models import from_pretrained
from tango_jax.models.tokenizer import tiny_tokenizer
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.rollout.base import FinishReason, Prompt, SamplingParams
from tango_jax.rollout.jax_sampler import JaxSampler

VOCAB = 64


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_hf_checkpoint(
        tmp_path_factory.mktemp("s") / "m",
        family="qwen2",
        heads=2,
        kv_heads=1,
        hidden=64,
        inter=128,
        vocab=VOCAB,
        head_dim=64,
    )


@pytest.fixture(scope="module")
def sampler(ckpt):
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    return JaxSampler(from_pretrained(ckpt), tiny_tokenizer(), mesh=mesh, prompt_bucket=16)


PROMPTS = [[5, 9, 13, 2, 40], [7, 3], [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21]]


def test_greedy_equals_transformers_generate(ckpt, sampler):
    hf = load_hf(ckpt)
    params = SamplingParams(temperature=0.0, max_tokens=12)
    got = sampler.generate([Prompt(tuple(p)) for p in PROMPTS], params)
    for prompt, (completion,) in zip(PROMPTS, got):
        with torch.no_grad():
            ref = hf.generate(
                torch.tensor([prompt]),
                max_new_tokens=12,
                do_sample=False,
                eos_token_id=1,
                pad_token_id=0,
            )[0, len(prompt) :].tolist()
        if 1 in ref:  # transformers stops after EOS, as we do
            ref = ref[: ref.index(1) + 1]
        assert list(completion.token_ids) == ref


def _first_token_logprobs(sampler, prompt, temperature):
    logits = np.asarray(sampler.model(jnp.asarray([prompt])))[0, -1].astype(np.float64)
    z = logits / temperature
    return z - np.log(np.exp(z - z.max()).sum()) - z.max()


def _chi2_ok(counts, probs):
    """Pearson chi-square against `probs`, bins with expected < 5 pooled; a 1e-6-level bound."""
    n = counts.sum()
    expected = probs * n
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    keep = exp > 0
    chi2 = (((obs - exp) ** 2)[keep] / exp[keep]).sum()
    df = keep.sum() - 1
    return chi2 < df + 7 * np.sqrt(2 * df), (chi2, df)


@pytest.mark.parametrize("top_k, top_p", [(-1, 1.0), (5, 1.0), (-1, 0.6)])
def test_sampled_token_frequencies_match_model(sampler, top_k, top_p):
    prompt, temperature, n = PROMPTS[0], 1.3, 3000
    params = SamplingParams(
        n=n, temperature=temperature, top_k=top_k, top_p=top_p, max_tokens=1, seed=1234
    )
    (samples,) = sampler.generate([Prompt(tuple(prompt))], params)
    toks = np.array([c.token_ids[0] for c in samples])
    logp = _first_token_logprobs(sampler, prompt, temperature)
    # reported log-probs are under logits / temperature, before filtering
    np.testing.assert_allclose([c.logprobs[0] for c in samples], logp[toks], rtol=1e-4, atol=1e-4)
    probs = np.exp(logp)
    allowed = np.ones(VOCAB, bool)
    if top_k > 0:
        allowed = probs >= np.sort(probs)[-top_k]
    if top_p < 1.0:
        order = np.argsort(-probs)
        before = np.cumsum(probs[order]) - probs[order]
        allowed = np.zeros(VOCAB, bool)
        allowed[order[before < top_p]] = True
    target = np.where(allowed, probs, 0.0)
    target /= target.sum()
    assert set(np.unique(toks)) <= set(np.flatnonzero(allowed))
    ok, stat = _chi2_ok(np.bincount(toks, minlength=VOCAB), target)
    assert ok, f"chi2={stat[0]:.1f} df={stat[1]}"


def test_same_seed_same_samples_and_n_rows_differ(sampler):
    params = SamplingParams(n=4, temperature=1.0, max_tokens=8, seed=7)
    a = sampler.generate([Prompt(tuple(PROMPTS[1]))], params)
    b = sampler.generate([Prompt(tuple(PROMPTS[1]))], params)
    assert [c.token_ids for c in a[0]] == [c.token_ids for c in b[0]]
    assert len({c.token_ids for c in a[0]}) > 1


def test_stop_token_ids_and_stop_strings(sampler):
    greedy = SamplingParams(temperature=0.0, max_tokens=10)
    (full,) = sampler.generate([Prompt(tuple(PROMPTS[2]))], greedy)[0]
    assert full.finish_reason is FinishReason.LENGTH and len(full.token_ids) == 10
    stop_tok = full.token_ids[3]
    first = full.token_ids.index(stop_tok)
    (cut,) = sampler.generate(
        [Prompt(tuple(PROMPTS[2]))],
        SamplingParams(temperature=0.0, max_tokens=10, stop_token_ids=(stop_tok,)),
    )[0]
    assert cut.token_ids == full.token_ids[: first + 1]
    assert cut.finish_reason is FinishReason.STOP
    tok = sampler.tokenizer
    text = tok.decode(list(full.token_ids[:6]), skip_special_tokens=True)
    stop = text[-2:] if len(text) >= 2 else text
    (by_string,) = sampler.generate(
        [Prompt(tuple(PROMPTS[2]))], SamplingParams(temperature=0.0, max_tokens=10, stop=(stop,))
    )[0]
    assert by_string.text.endswith(stop) and by_string.finish_reason is FinishReason.STOP
    assert by_string.text.count(stop) == 1
    assert full.token_ids[: len(by_string.token_ids)] == by_string.token_ids


def test_sharded_sampler_equals_single_device(ckpt, sampler):
    mesh = make_mesh(MeshConfig(2, 2, 2))
    sharded = JaxSampler(
        from_pretrained(ckpt, mesh=mesh), tiny_tokenizer(), mesh=mesh, prompt_bucket=16
    )
    params = SamplingParams(temperature=0.0, max_tokens=8)
    prompts = [Prompt(tuple(p)) for p in PROMPTS]
    a = [c[0].token_ids for c in sharded.generate(prompts, params)]
    b = [c[0].token_ids for c in sampler.generate(prompts, params)]
    assert a == b


def test_one_program_per_bucket(ckpt):
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    s = JaxSampler(from_pretrained(ckpt), tiny_tokenizer(), mesh=mesh, prompt_bucket=16)
    params = SamplingParams(n=2, temperature=1.0, max_tokens=5, seed=0)
    s.generate([Prompt((3, 4, 5))], params)
    s.generate([Prompt((3, 4, 5, 6, 7, 8, 9)), Prompt((9,))], params)  # same row/prompt buckets
    s.generate([Prompt((3, 4))], SamplingParams(n=2, temperature=0.5, max_tokens=5, seed=1))
    (fn,) = s._compiled.values()
    assert fn._cache_size() == 1


def test_version_is_recorded(sampler):
    sampler.update_weights(None, 7)
    (c,) = sampler.generate([Prompt((3, 4))], SamplingParams(max_tokens=2, seed=0))[0]
    assert c.weight_version == 7
