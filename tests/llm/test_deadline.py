"""Bounds on one call the client's per-read timeout does not give (``inmind_exp.llm.deadline``): an endpoint that
drips its reply a byte a second is cut at the call's deadline and retried as a timeout; a reply larger than the cap
is an error for its task (not retried); a 200 whose body is an HTML error page is an endpoint error naming the
endpoint, retried like a 5xx. Real sockets, the real openai client."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from inmind_exp.llm import LLMCallError, LLMClient
from inmind_exp.records import msgs
from tests.conftest import fake_endpoints

HELLO = msgs(("user", "hello"))
COMPLETION = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "fake-model",
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": "fine"},
                                      "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()


class RawServer:
    """A one-thread-per-connection HTTP server on 127.0.0.1 answering each request with ``respond(n, conn)``
    (n counts requests from 1); every request is counted in ``requests``."""

    def __init__(self, respond):
        self.respond, self.requests, self._stop = respond, 0, threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = next((int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")), 0)
            while len(body) < length:
                body += conn.recv(65536)
            self.requests += 1
            try:
                self.respond(self.requests, conn)
            except OSError:
                pass

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


def reply(conn: socket.socket, body: bytes, content_type: str = "application/json") -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: " + content_type.encode() + b"\r\nContent-Length: "
                 + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)


def drip(conn: socket.socket, data: bytes, stop_after_s: float = 60.0) -> None:
    t0 = time.monotonic()
    for b in data:
        if time.monotonic() - t0 > stop_after_s:
            return
        conn.sendall(bytes([b]))
        time.sleep(1.0)


@pytest.fixture
def server():
    made = []

    def make(respond):
        made.append(RawServer(respond))
        return made[-1]

    yield make
    for s in made:
        s.close()


def client(base_url: str, **kw) -> LLMClient:
    return LLMClient(fake_endpoints(base_url, **kw)["answerer"])


@pytest.mark.parametrize("where", ["body", "headers"])
def test_a_dripping_endpoint_is_cut_at_the_deadline_and_retried(server, where):
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + str(len(COMPLETION)).encode()
            + b"\r\n\r\n")

    def respond(n, conn):
        if where == "body":
            conn.sendall(head)
            drip(conn, COMPLETION)
        else:
            drip(conn, head + COMPLETION)

    s = server(respond)
    c = client(s.base_url, timeout_s=5.0, deadline_s=2.5, max_attempts=2)
    t0 = time.monotonic()
    with pytest.raises(LLMCallError, match=r"timeout \(llm.timeout_s=5.0, llm.deadline_s=2.5\) after retries"):
        c.chat(HELLO)
    took = time.monotonic() - t0
    assert s.requests == 2  # a timeout, so retried
    assert 4.5 < took < 9.0, took  # two deadlines, not 5 s per byte


def test_a_reply_over_the_size_cap_is_a_task_error_not_retried(server):
    big = json.dumps({**json.loads(COMPLETION), "choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": "x" * (3 * 1024 * 1024)}}]}).encode()
    s = server(lambda n, conn: reply(conn, big))
    c = client(s.base_url, max_response_bytes=1024 * 1024)
    with pytest.raises(LLMCallError, match=r"response larger than 1048576 bytes \(llm.max_response_bytes\)"):
        c.chat(HELLO)
    assert s.requests == 1
    assert client(s.base_url).chat(HELLO).text.startswith("xxx")  # the default cap (4 MiB) takes it


def test_an_html_200_is_an_endpoint_error_naming_it_and_retried(server):
    page = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
    s = server(lambda n, conn: reply(conn, page, "text/html") if n == 1 else reply(conn, COMPLETION))
    assert client(s.base_url).chat(HELLO).text == "fine" and s.requests == 2  # retried like a 5xx

    s2 = server(lambda n, conn: reply(conn, page, "text/html"))
    with pytest.raises(LLMCallError) as e:
        client(s2.base_url, max_attempts=3).chat(HELLO)
    assert s2.requests == 3
    assert s2.base_url in str(e.value) and "not a choices reply" in str(e.value) and "Bad Gateway" in str(e.value)


def test_invalid_json_200_is_retried_too(server):
    s = server(lambda n, conn: reply(conn, b'{"choices": [') if n == 1 else reply(conn, COMPLETION))
    assert client(s.base_url).chat(HELLO).text == "fine" and s.requests == 2


def test_the_startup_check_ends_at_the_deadline_too(server):
    """``/models`` dripping a byte a second held the launch 300 s with ``llm.deadline_s=20``: the check used a
    plain client, whose timeout is per read. It now fails at the deadline with one line naming both settings."""
    from inmind_exp.errors import EndpointError
    from inmind_exp.llm.preflight import check_endpoints

    models = b'{"object": "list", "data": [{"id": "fake-model", "object": "model"}]}'
    s = server(lambda n, conn: drip(conn, b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(models)).encode()
                                    + b"\r\n\r\n" + models))
    ep = fake_endpoints(s.base_url, deadline_s=2.0)["answerer"]
    t0 = time.monotonic()
    with pytest.raises(EndpointError, match=r"did not answer /models in time .*llm.deadline_s=2.0"):
        check_endpoints([ep], timeout_s=5.0)
    assert time.monotonic() - t0 < 4.5 and s.requests == 1
