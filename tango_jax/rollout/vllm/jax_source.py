"""A JAX model's parameters as a vLLM `WeightSource`: HF names and layouts, sampler dtype.

vLLM's trainer-side weight-transfer engines (NCCL, and tango_jax's gloo) consume a
`WeightSource`: `metadata()` declares (name, dtype, shape) of every tensor without moving
data, and iteration yields (name, torch.Tensor) one at a time. This adapter walks the model
family's name/layout table (`models.hf.iter_hf_tensors`), so weight sync cannot disagree with
checkpoint loading and saving about a name or a transpose.

Per tensor, on the trainer's mesh: HF layout transform and cast to the sampler's dtype on
device (sharded, so a bf16 sampler halves the bytes gathered), then the gather:
  device="cpu"   the full tensor on the host (`process_allgather` when the array spans
                 several processes), handed to torch without a copy;
  device="cuda"  the full tensor on this process's first local GPU, handed to torch through
                 DLPack without a copy (what the NCCL engine broadcasts from).
Only one parameter is ever gathered at a time, never the whole model.

Timings accumulate in `convert_s` (layout + cast, blocked until done) and `gather_s`.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource

from tango_jax.models.config import ModelConfig
from tango_jax.models.hf import iter_hf_tensors, tensor_table, to_host


class JaxWeightSource(WeightSource):
    """Yields the parameters of `state` (an `nnx.State` of a model with `config`) as torch
    tensors in HF layout and `dtype` ("bfloat16", "float32", ...). Call `set_state` before
    each sync; iterate on every JAX process (the gather is a collective across processes)."""

    def __init__(self, config: ModelConfig, dtype: str, device: str = "cpu"):
        if device not in ("cpu", "cuda"):
            raise ValueError(f"JaxWeightSource.device ({device!r}) must be 'cpu' or 'cuda'.")
        self.config = config
        self.jax_dtype = jnp.dtype(dtype)
        self.torch_dtype = getattr(torch, self.jax_dtype.name)
        self.device = device
        self.state: Any = None
        self.convert_s = 0.0
        self.gather_s = 0.0

    def set_state(self, state: Any) -> None:
        self.state = state
        self.convert_s = self.gather_s = 0.0

    def metadata(self) -> list[ParamMeta]:
        return [
            ParamMeta(e.hf_name, self.torch_dtype, tuple(e.hf_shape))
            for e in tensor_table(self.config)
        ]

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        if self.state is None:
            raise RuntimeError("JaxWeightSource: call set_state(state) before iterating.")
        for name, x in iter_hf_tensors(self.state, self.config, dtype=self.jax_dtype):
            t0 = time.perf_counter()
            x = jax.block_until_ready(x)
            t1 = time.perf_counter()
            tensor = self._gather(x)
            self.convert_s += t1 - t0
            self.gather_s += time.perf_counter() - t1
            yield name, tensor

    def _gather(self, x: jax.Array) -> torch.Tensor:
        if self.device == "cuda" and x.is_fully_addressable:
            # Ready before torch reads it: torch's stream knows nothing of XLA's.
            whole = jax.block_until_ready(jax.device_put(x, jax.local_devices()[0]))
            return torch.utils.dlpack.from_dlpack(whole)
        host = np.ascontiguousarray(to_host(x))
        with warnings.catch_warnings():  # read-only buffer: torch only reads it
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            # Through bytes: torch has no view of ml_dtypes' bfloat16 arrays.
            tensor = torch.from_numpy(host.reshape(-1).view(np.uint8)).view(self.torch_dtype)
        tensor = tensor.view(host.shape)
        return tensor.cuda() if self.device == "cuda" else tensor
