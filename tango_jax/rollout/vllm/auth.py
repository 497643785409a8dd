"""ASGI middleware that puts every route of a vLLM server behind its API key.

vLLM's `--api-key` checks only paths under /v1, /v2, /inference and /cohere. The routes that
RL needs (`/init_weight_transfer_engine`, `/update_weights`, `/collective_rpc`, `/sleep`, ...,
enabled by VLLM_SERVER_DEV_MODE=1) sit outside those prefixes and would stay open to anyone who
can reach the port: they replace the model's weights. `launch_vllm.py` / `VLLMServer` install
this class with vLLM's supported `--middleware` option whenever a key is configured; it
requires `Authorization: Bearer <key>` on every path except the liveness probes /health and
/ping. The key comes from the VLLM_API_KEY environment variable (never the command line,
where `ps` would show it), read once at startup; a missing key stops the server from starting
rather than serving the routes open.

On the trainer's side the key comes from the environment variable a config names
(`sampler.vllm.api_key_env`, resolved by `key_from` when a client or server starts), so it is
never in the run's config.json, W&B config or command line; a key given as `api_key` itself is
accepted but redacted wherever the config is written (schema.to_dict).
"""

from __future__ import annotations

import hashlib
import hmac
import os

KEY_ENV = "VLLM_API_KEY"
OPEN_PATHS = frozenset({"/health", "/ping"})
_UNAUTHORIZED = b'{"error": "Unauthorized: send the server API key as a Bearer token."}'


def key_from(api_key: str | None, api_key_env: str) -> str | None:
    """The key to use: `api_key`, else the value of the environment variable `api_key_env`
    (an empty name: no key). A named variable that is unset or empty is an error, not no key."""
    if api_key or not api_key_env:
        return api_key or None
    key = os.environ.get(api_key_env, "")
    if not key:
        raise ValueError(
            f"sampler.vllm.api_key_env ({api_key_env!r}): that environment variable is unset or "
            f"empty; export {api_key_env}=<the servers' key> before launching (the key itself "
            "never goes in the config)."
        )
    return key


class PrivilegedRouteAuth:
    """Pure ASGI middleware (vLLM calls `app.add_middleware(PrivilegedRouteAuth)`)."""

    def __init__(self, app):
        key = os.environ.get(KEY_ENV, "")
        if not key:
            raise RuntimeError(
                f"tango_jax.rollout.vllm.auth.PrivilegedRouteAuth is installed but {KEY_ENV} "
                "is empty: set it to the server's API key (refusing to serve the weight-update "
                "routes unprotected)."
            )
        self.app = app
        self._digest = hashlib.sha256(f"Bearer {key}".encode()).digest()

    def _authorized(self, scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                return hmac.compare_digest(hashlib.sha256(value).digest(), self._digest)
        return False

    async def __call__(self, scope, receive, send):
        if (
            scope["type"] not in ("http", "websocket")
            or scope.get("method") == "OPTIONS"
            or scope["path"].removeprefix(scope.get("root_path", "")) in OPEN_PATHS
            or self._authorized(scope)
        ):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": _UNAUTHORIZED})
