"""The embedded JAX sampler against transformers' generate and the model's own distribution."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from hf_fixtures import load_hf, write_hf_checkpoint
from jaxpr_dots import dot_operands

from tango_jax.models import from_pretrained
from tango_jax.models.tokenizer import tiny_tokenizer
from tango_jax.parallel.buckets import round_up
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.rollout.base import FinishReason, Prompt, SamplingParams
from tango_jax.rollout.decode_loop import decode_chunks
from tango_jax.rollout.jax_sampler import JaxSampler, _generate
from tango_jax.rollout.sampling import Sampling

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
    s = JaxSampler(
        from_pretrained(ckpt), tiny_tokenizer(), mesh=mesh, prompt_bucket=16, share_prefix=False
    )
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


def test_decode_chunks_schedule():
    assert decode_chunks(16, 12, 0) == [(12, None)]  # today's decode: one loop, whole cache
    assert decode_chunks(16, 12, 4) == [(4, 20), (8, 24), (12, 28)]
    assert decode_chunks(16, 5, 2) == [(2, 18), (4, 20), (5, 21)]
    assert decode_chunks(16, 12, 64) == [(12, 28)]
    assert decode_chunks(64, 3072, 256) == [
        (256, 320), (512, 576), (1024, 1088), (2048, 2112), (3072, 3136)
    ]  # fmt: skip
    with pytest.raises(ValueError, match=r"decode_block \(-1\) must be >= 0"):
        JaxSampler(None, None, mesh=make_mesh(MeshConfig(1, 1, 1), jax.devices()[:1]),
                   decode_block=-1)  # fmt: skip


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.0, max_tokens=12),
        SamplingParams(n=3, temperature=1.0, top_k=9, max_tokens=12, seed=11),
        SamplingParams(n=2, temperature=0.8, max_tokens=12, seed=5, stop_token_ids=(7, 20, 33)),
    ],
    ids=["greedy", "sampled", "stops"],
)
def test_chunked_decode_gives_the_same_tokens_and_logprobs(sampler, params):
    """decode_block > 0 (attention over the filled prefix only) against today's decode over
    the whole cache: the same tokens, finish reasons and log-probs (float summation order)."""
    chunked = JaxSampler(
        sampler.model, tiny_tokenizer(), mesh=sampler.mesh, prompt_bucket=16, decode_block=2
    )  # chunks end at 2, 4, 8, 12 steps
    prompts = [Prompt(tuple(p)) for p in PROMPTS]
    want = [c for cs in sampler.generate(prompts, params) for c in cs]
    got = [c for cs in chunked.generate(prompts, params) for c in cs]
    assert [c.token_ids for c in got] == [c.token_ids for c in want]
    assert [c.finish_reason for c in got] == [c.finish_reason for c in want]
    if params.stop_token_ids:  # the early exit crosses chunks: some rows stop, some run on
        assert {c.finish_reason for c in want} == {FinishReason.STOP, FinishReason.LENGTH}
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.logprobs, w.logprobs, rtol=1e-5, atol=1e-6)


def _attended_slots(sampler, params, prompt_len):
    """The key/value lengths (cache slots) of the attention products in the sampler's program."""
    program = Sampling(params.greedy, params.top_k, params.top_p, params.max_tokens)
    b, p = sampler.row_bucket, round_up(prompt_len, sampler.prompt_bucket)
    cfg = sampler.model.config
    args = (
        nnx.state(sampler.model),
        jnp.zeros((b, p), jnp.int32),
        jnp.ones((b, p), bool),
        jax.random.key(0),
        jnp.float32(1.0),
        jnp.asarray([1], jnp.int32),
    )
    fn = functools.partial(
        _generate,
        graphdef=nnx.graphdef(sampler.model),
        program=program,
        cache_dtype=sampler.cache_dtype,
        decode_block=sampler.decode_block,
    )
    jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
    # scores: dot_general(q [B, T, K, G, H], k [B, K, S, H]); then probs against v [B, K, S, H];
    # a summed decode step (decode_attention "sum") multiplies the query [B, K, G, 1, H] by
    # the keys [B, K, 1, S, H], then the probs by the values [B, K, 1, S, H]
    kh, h = cfg.num_kv_heads, cfg.head_dim
    kv = {(b, kh, s, h) for s in range(1, 1000)}
    summed = {(b, kh, 1, s, h) for s in range(1, 1000)}
    dots = {a.shape[2] for ops in dot_operands(jaxpr) for a in ops if a.shape in kv}
    muls = {a.shape[3] for ops in dot_operands(jaxpr, ("mul",)) for a in ops if a.shape in summed}
    return dots | muls


def test_chunked_decode_reads_only_a_prefix_of_the_cache(sampler):
    params = SamplingParams(temperature=0.0, max_tokens=12)
    chunked = JaxSampler(
        sampler.model, tiny_tokenizer(), mesh=sampler.mesh, prompt_bucket=16, decode_block=2
    )
    # 16 prompt slots + 12 new: today every product reads all 28 slots, prefill included
    assert _attended_slots(sampler, params, 5) == {28}
    assert _attended_slots(chunked, params, 5) == {16, 18, 20, 24, 28}
