"""The prefix-sharing JAX sampler against the plain one (share_prefix=False), and its pieces:
the prefill plan, the exponential-race draw and the decode's batch shrinking."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tango_jax.models import Transformer, presets
from tango_jax.models.tokenizer import tiny_tokenizer
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.parallel.partition import init_sharded
from tango_jax.rollout.base import FinishReason, Prompt, SamplingParams
from tango_jax.rollout.decode_loop import SegmentedDecode, segments
from tango_jax.rollout.jax_sampler import JaxSampler
from tango_jax.rollout.sampling import race_draw
from tango_jax.rollout.shared_prefill import PREFIX_GRANULE, common_prefix_len, plan_prefill


def _prompts(seed: int = 0, shared: int = 21) -> list[Prompt]:
    """Eleven prompts behind a common `shared`-token prefix, of 1-29 more tokens, one repeated
    (shared = 0: the prompts' first tokens differ, nothing is prefilled once per batch)."""
    rng = np.random.default_rng(seed)
    prefix = tuple(rng.integers(3, 500, shared).tolist())
    prompts = [
        Prompt(prefix + tuple(rng.integers(3, 500, int(k)).tolist()))
        for k in rng.integers(1, 30, 10)
    ]
    return [*prompts, prompts[3]]


# 30 of the 512 ids end a row: about one row in seventeen stops at each step, so rows finish at
# different steps and the decode drops them in several rounds
STOPS = tuple(range(100, 130))


def _model(name: str, mesh):
    return init_sharded(lambda: Transformer(presets.get(name), rngs=nnx.Rngs(0)), mesh)


@pytest.fixture(scope="module")
def qwen2():
    """(one-device mesh, tiny-qwen2 on it), shared by the tests that need no other model."""
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    return mesh, _model("tiny-qwen2", mesh)


def _flat(out):
    return [c for per_prompt in out for c in per_prompt]


def _assert_same(got, want):
    assert [c.token_ids for c in got] == [c.token_ids for c in want]
    assert [c.finish_reason for c in got] == [c.finish_reason for c in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.logprobs, w.logprobs, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("family", ["tiny-qwen2", "tiny-llama", "tiny-qwen3"])
@pytest.mark.parametrize("devices", [1, 8], ids=["one-device", "mesh-2x2x2"])
def test_shared_prefix_samples_equal_the_plain_samplers(family, devices):
    """The same tokens, finish reasons and log-probs (float rounding) with a fixed seed, while
    the shared path really shares (a prefix, several suffix groups, a repeated prompt) and
    really drops finished rows (its row-gather program ran)."""
    if devices == 1:
        mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    else:
        mesh = make_mesh(MeshConfig(2, 2, 2))
    model = _model(family, mesh)
    kw = dict(mesh=mesh, prompt_bucket=8, max_rows=32)
    plain = JaxSampler(model, tiny_tokenizer(), share_prefix=False, **kw)
    shared = JaxSampler(model, tiny_tokenizer(), decode_segment=4, **kw)
    prompts = _prompts()
    params = SamplingParams(n=3, temperature=1.0, max_tokens=20, seed=3, stop_token_ids=STOPS)
    want = _flat(plain.generate(prompts, params))
    got = _flat(shared.generate(prompts, params))
    _assert_same(got, want)
    assert {c.finish_reason for c in want} == {FinishReason.STOP, FinishReason.LENGTH}
    assert len({len(c.token_ids) for c in want}) > 5
    prefill, decode = shared._shared
    assert decode._take._cache_size() >= 1  # a smaller batch was gathered
    assert prefill.prefix._cache_size() >= 1 and prefill.group._cache_size() >= 2


FILTERED = SamplingParams(
    n=4, temperature=0.7, top_k=20, top_p=0.9, max_tokens=16, seed=5, stop_token_ids=STOPS
)


@pytest.mark.parametrize(
    "params, shared, decode_block",
    [
        (SamplingParams(n=2, temperature=0.0, max_tokens=12), 21, 0),
        (FILTERED, 21, 0),
        (FILTERED, 0, 0),
        (FILTERED, 21, 2),
    ],
    ids=["greedy", "top-k-top-p", "no-common-prefix", "chunked-decode"],
)
def test_shared_prefix_equals_plain_other_settings(qwen2, params, shared, decode_block):
    """Greedy and filtered sampling; prompts without a common prefix (each distinct prompt
    prefilled whole, once); the chunked decode (decode_block > 0) on both paths."""
    mesh, model = qwen2
    prompts = _prompts(1, shared)
    assert common_prefix_len([p.token_ids for p in prompts]) == shared
    kw = dict(mesh=mesh, prompt_bucket=16, decode_block=decode_block)
    plain = JaxSampler(model, tiny_tokenizer(), share_prefix=False, **kw)
    sharing = JaxSampler(model, tiny_tokenizer(), decode_segment=4, **kw)
    want, got = _flat(plain.generate(prompts, params)), _flat(sharing.generate(prompts, params))
    _assert_same(got, want)
    assert (sharing._shared[0].prefix._cache_size() > 0) == (shared > 0)


def test_samples_do_not_depend_on_max_rows_or_decode_segment(qwen2):
    """Each row has its own random stream: batches of 8 rows or of all of them, looked at every
    3 or 16 steps, sample the same tokens."""
    mesh, model = qwen2
    prompts = _prompts(2)[:6]
    params = SamplingParams(n=4, temperature=1.0, max_tokens=12, seed=9, stop_token_ids=STOPS)
    small = JaxSampler(model, tiny_tokenizer(), mesh=mesh, max_rows=8, decode_segment=3)
    large = JaxSampler(model, tiny_tokenizer(), mesh=mesh, max_rows=64)
    a, b = _flat(small.generate(prompts, params)), _flat(large.generate(prompts, params))
    _assert_same(a, b)


def test_a_second_call_of_the_same_shapes_compiles_nothing(qwen2):
    mesh, model = qwen2
    s = JaxSampler(model, tiny_tokenizer(), mesh=mesh, prompt_bucket=16)
    params = SamplingParams(n=2, temperature=1.0, max_tokens=6, seed=0)
    s.generate(_prompts(3), params)
    prefill, decode = s._shared

    def sizes():
        fns = [prefill.prefix, prefill.group, prefill.assemble, decode._take]
        return [f._cache_size() for f in fns + list(decode._programs.values())]

    before = sizes()
    s.generate(_prompts(3), SamplingParams(n=2, temperature=0.5, max_tokens=6, seed=1))
    assert sizes() == before


def test_common_prefix_len():
    assert common_prefix_len([(1, 2, 3, 4), (1, 2, 5), (1, 2, 3)]) == 2
    assert common_prefix_len([(7, 1), (8, 1)]) == 0
    assert common_prefix_len([(1, 2), (1, 2, 3)]) == 2


def test_plan_prefill_by_hand():
    pre = tuple(range(10, 10 + 2 * PREFIX_GRANULE + 3))  # 19 shared tokens -> 16 prefilled once
    distinct = [(*pre, 1), (*pre, 2, 3, 4, 5, 6), (*pre, 7, 8), (*pre, *range(30, 42))]
    plan = plan_prefill(distinct, group_rows=2, bucket=4, pad_id=0)
    assert plan.prefix == pre[:16]
    # longest suffix first (3 shared tokens + the distinct part): 15, 8 | 5, 4 tokens
    assert [g.members for g in plan.groups] == [(3, 1), (2, 0)]
    assert [g.width for g in plan.groups] == [16, 8]
    assert plan.slot_of.tolist() == [3, 1, 2, 0]
    g = plan.groups[1]
    assert g.tokens[1].tolist() == [0, 0, 0, 0, *pre[16:], 1]  # left-padded suffix of prompt 0
    assert g.valid[1].tolist() == [False] * 4 + [True] * 4
    assert plan.prompt_slots == 16 + 16 and plan.prefill_tokens == 16 + 2 * 16 + 2 * 8


def test_plan_keeps_a_token_of_every_prompt_in_its_suffix():
    one = tuple(range(3, 3 + 2 * PREFIX_GRANULE))  # 16 tokens: 8 shared, 8 in the suffix
    plan = plan_prefill([one], group_rows=8, bucket=8, pad_id=0)
    assert len(plan.prefix) == PREFIX_GRANULE and plan.groups[0].valid.sum() == PREFIX_GRANULE
    short = plan_prefill([one[:5], one], group_rows=8, bucket=8, pad_id=0)  # a prefix of another
    assert short.prefix == ()


def _hash32_np(x):
    x = x.astype(np.uint64) & 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


def test_race_draw_equals_numpy_and_skips_masked_tokens():
    rng = np.random.default_rng(0)
    b, v = 64, 1000
    logits = (rng.normal(size=(b, v)) * 2).astype(np.float32)
    masked = rng.random((b, v)) < 0.5
    masked[:, :5] = True
    logits = np.where(masked, np.finfo(np.float32).min, logits)
    seeds = rng.integers(0, 2**32, b, dtype=np.uint64).astype(np.uint32)
    got = np.asarray(race_draw(jnp.asarray(seeds), jnp.asarray(logits)))
    # NumPy, in float64: argmax p / E with E = -log(u), u from the hash of (seed, token id)
    ids = _hash32_np((np.arange(v, dtype=np.uint64) * 0x9E3779B9 + 1) & 0xFFFFFFFF)
    u = ((_hash32_np(seeds[:, None].astype(np.uint64) ^ ids[None, :]) >> 8) + 0.5) / 2**24
    p = np.exp(logits.astype(np.float64) - logits.max(-1, keepdims=True))
    np.testing.assert_array_equal(got, np.argmax(p / -np.log(u), axis=-1))
    assert not masked[np.arange(b), got].any()


def test_race_draw_frequencies():
    """One row's draws over 20,000 seeds against softmax(logits): Pearson's chi-square (4
    degrees of freedom) below its mean + 7 standard deviations, a 1e-4 tail (the seeds are
    fixed, so the test does not flake), and never the zero-probability token."""
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05, 0.0]) + 1e-30).astype(np.float32)
    seeds = np.arange(20_000, dtype=np.uint32) * np.uint32(2654435761)
    got = np.asarray(race_draw(jnp.asarray(seeds), jnp.tile(jnp.asarray(logits), (20_000, 1))))
    counts = np.bincount(got, minlength=6)
    expected = 20_000 * np.array([0.5, 0.2, 0.15, 0.1, 0.05])
    assert counts[5] == 0
    chi2 = ((counts[:5] - expected) ** 2 / expected).sum()
    assert chi2 < 4 + 7 * np.sqrt(8), (counts, chi2)


def test_segments_and_the_smaller_batch():
    assert segments(8, 10, segment=4, block=0) == [(0, 4, None), (4, 8, None), (8, 10, None)]
    assert segments(8, 12, segment=4, block=2) == [(0, 2, 10), (2, 4, 12), (4, 8, 16), (8, 12, 20)]
    d = SegmentedDecode(None, segment=4, block=0, row_bucket=8)
    done = np.ones(32, bool)
    assert d._smaller_batch(np.zeros(32, bool)) is None  # all running
    done[[3, 20]] = False
    keep = d._smaller_batch(done)
    assert len(keep) == 8 and keep[:2].tolist() == [3, 20] and done[keep[2:]].all()
    done[:12] = False  # 13 running: 16 rows
    assert len(d._smaller_batch(done)) == 16
    done[:17] = False  # 18 running: stays at 32
    assert d._smaller_batch(done) is None
    assert d._smaller_batch(np.ones(8, bool)) is None  # already the smallest batch
    done = np.ones(40, bool)  # 5 buckets: 24, 16, 8 rows (halves rounded up to a bucket)
    done[:10] = False
    assert len(d._smaller_batch(done)) == 16
    done[:17] = False
    assert len(d._smaller_batch(done)) == 24


def test_share_prefix_is_a_config_field_that_reaches_the_sampler(qwen2):
    from tango_jax.config.roles import RoleConfig, SamplerSettings
    from tango_jax.config.run import base_config, load_run_config
    from tango_jax.run.roles import make_sampler

    c = base_config()
    c.generator.model.preset = c.verifier.model.preset = "tiny-qwen2"
    assert load_run_config(c).verifier.sampler.share_prefix  # on by default
    c.verifier.sampler.share_prefix = False
    assert not load_run_config(c).verifier.sampler.share_prefix
    mesh, model = qwen2
    for share in (True, False):
        role = RoleConfig(sampler=SamplerSettings(share_prefix=share))
        sampler = make_sampler(role, model, model.config, tiny_tokenizer(), mesh, None)
        assert sampler.share_prefix is share
