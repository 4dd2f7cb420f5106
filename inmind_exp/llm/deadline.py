"""Bounds on one HTTP call that the client's own timeout does not give: a deadline for the whole call (connect,
request, headers and body together) and a cap on the response's size.

The ``openai`` client's ``timeout`` bounds each socket read, so an endpoint that drips one byte a second holds a
call for ever. Here the network layer under the client (an ``httpcore`` network backend) clamps every connect, read
and write to the time left before the call's deadline, and raises a read timeout once it has passed: the client
reports ``APITimeoutError``, which is retried like any timeout. The bytes read are counted per call; past
``max_bytes`` the call ends with ``ResponseTooLarge`` (an error for the task, not retried: the same request would
get the same reply). The limits of the running call are thread-local (``call_limits``), as the client's sync
calls run in the calling thread.
"""

from __future__ import annotations

import importlib
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import openai

#: default deadline of one call: long enough for a reasoning model's longest answer (``llm.deadline_s``)
DEFAULT_DEADLINE_S = 600.0
#: default cap on one response's size, headers included (``llm.max_response_bytes``): 4 MiB
DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024


def _httpcore() -> Any:
    """The httpcore the installed ``openai`` runs on (``httpcore2`` beside ``httpx2``, else ``httpcore``)."""
    for name in ("httpcore2", "httpcore"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("neither httpcore2 nor httpcore is installed (the openai client needs one)")


def _httpx() -> Any:
    for name in ("httpx2", "httpx"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("neither httpx2 nor httpx is installed (the openai client needs one)")


class ResponseTooLarge(openai.OpenAIError):
    """The endpoint's reply exceeded ``max_response_bytes``; the call is an error for its task."""

    def __init__(self, limit: int):
        super().__init__(f"response larger than {limit} bytes (llm.max_response_bytes)")
        self.limit = limit


@dataclass
class _Limits:
    deadline: float | None  # time.monotonic() at which the call must have ended
    max_bytes: int | None
    read: int = 0


_local = threading.local()


@contextmanager
def call_limits(deadline_s: float | None, max_bytes: int | None) -> Iterator[None]:
    """Bound the HTTP calls made by this thread inside the block: ``deadline_s`` from now (None: no deadline) and
    ``max_bytes`` read (None: no cap). Nested blocks are not expected; the inner one wins while it runs."""
    previous = getattr(_local, "limits", None)
    _local.limits = _Limits(time.monotonic() + deadline_s if deadline_s else None, max_bytes)
    try:
        yield
    finally:
        _local.limits = previous


def _current() -> _Limits | None:
    return getattr(_local, "limits", None)


def _clamp(timeout: float | None) -> float | None:
    """``timeout`` cut to the time left before the current call's deadline; a read timeout when none is left."""
    lim = _current()
    if lim is None or lim.deadline is None:
        return timeout
    left = lim.deadline - time.monotonic()
    if left <= 0:
        raise _httpcore().ReadTimeout("call deadline passed (llm.deadline_s)")
    return left if timeout is None else min(timeout, left)


class _Stream:
    """A network stream whose every operation respects the current call's deadline and byte cap."""

    def __init__(self, inner: Any):
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = self._inner.read(max_bytes, _clamp(timeout))
        lim = _current()
        if lim is not None:
            lim.read += len(data)
            if lim.max_bytes is not None and lim.read > lim.max_bytes:
                raise ResponseTooLarge(lim.max_bytes)
            if lim.deadline is not None and time.monotonic() > lim.deadline:
                raise _httpcore().ReadTimeout("call deadline passed (llm.deadline_s)")
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _clamp(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, _clamp(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend:
    """httpcore's sync network backend with ``_Stream`` around each connection."""

    def __init__(self, inner: Any):
        self._inner = inner

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> _Stream:
        return _Stream(self._inner.connect_tcp(host, port, _clamp(timeout), local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> _Stream:
        return _Stream(self._inner.connect_unix_socket(path, _clamp(timeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def bounded_http_client() -> Any:
    """An ``openai.DefaultHttpxClient`` whose connections go through the deadline- and size-bounded backend."""
    hx, hc = _httpx(), _httpcore()
    transport = hx.HTTPTransport(limits=openai.DEFAULT_CONNECTION_LIMITS)
    pool = getattr(transport, "_pool", None)
    if pool is not None and hasattr(pool, "_network_backend"):
        pool._network_backend = _Backend(hc.SyncBackend())  # no public hook: the pool builds connections with it
    return openai.DefaultHttpxClient(transport=transport)
