"""Blocking client of a pipeline process's HTTP API (standard library only).

An error answer raises the HubstreamError it names (UnknownPipeline, UnknownWriter, WriterBusy …) or,
by status, InvalidInput / NotFound / ConflictError / ServiceUnavailable, with the server's reason.
No answer at all raises ProcessUnreachable.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import orjson

from app.errors import ConflictError, HubstreamError, InvalidInput, NotFound, ServiceUnavailable
from app.pipeline.errors import PipelineNotRunning, UnknownPipeline, UnknownWriter, WriterBusy
from app.settings import Settings, is_loopback

__all__ = ["NotAuthorized", "PipelineClient", "ProcessUnreachable", "default_url"]


class ProcessUnreachable(ServiceUnavailable):
    """No pipeline process answers at the URL."""


class NotAuthorized(HubstreamError):
    """The pipeline process wants the admin token (HUBSTREAM_ADMIN_TOKEN)."""

    http_status = 401


_BY_NAME: dict[str, type[HubstreamError]] = {
    cls.__name__: cls
    for cls in (UnknownPipeline, UnknownWriter, WriterBusy, PipelineNotRunning, InvalidInput)
}
_BY_STATUS: dict[int, type[HubstreamError]] = {
    400: InvalidInput,
    401: NotAuthorized,
    404: NotFound,
    409: ConflictError,
    413: InvalidInput,
    422: InvalidInput,
    503: ServiceUnavailable,
}


def default_url(settings: Settings) -> str:
    host = settings.web_host
    if host in {"0.0.0.0", "::", ""}:  # listening everywhere: reach it on loopback
        host = "127.0.0.1"
    return f"http://{host}:{settings.pipeline_web_port}"


class PipelineClient:
    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.headers = {"Content-Type": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        # A process on loopback is never reached through HTTP_PROXY: the proxy would see the token.
        direct = is_loopback(urllib.parse.urlsplit(self.base_url).hostname or "")
        handlers = [urllib.request.ProxyHandler({})] if direct else []
        self._opener = urllib.request.build_opener(*handlers)

    def get(self, path: str, query: dict[str, int] | None = None) -> Any:
        suffix = f"?{urllib.parse.urlencode(query)}" if query else ""
        return self._send("GET", path + suffix, None)

    def post(self, path: str, body: Any = None) -> Any:
        return self._send("POST", path, orjson.dumps(body) if body is not None else b"")

    def _send(self, method: str, path: str, data: bytes | None) -> Any:
        url = self.base_url + path
        request = urllib.request.Request(url, data=data, method=method, headers=self.headers)
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                return self._decode(url, response.read())
        except urllib.error.HTTPError as exc:
            answer = self._decode(url, exc.read())
            reason = str(answer.get("reason") or exc.reason) if isinstance(answer, dict) else str(exc.reason)
            name = answer.get("error") if isinstance(answer, dict) else None
            error = _BY_NAME.get(str(name)) or _BY_STATUS.get(exc.code, HubstreamError)
            raise error(reason) from None
        except (urllib.error.URLError, OSError) as exc:
            cause = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise ProcessUnreachable(
                f"no pipeline process answers at {self.base_url} ({cause}): is `hubstream pipeline run` "
                "running there? (set PIPELINE_WEB_PORT or --url)"
            ) from None

    def _decode(self, url: str, body: bytes) -> Any:
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            raise ProcessUnreachable(
                f"{url} did not answer JSON: not a hubstream pipeline process?"
            ) from None
