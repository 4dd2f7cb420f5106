"""A fake OpenAI-compatible HTTP server for tests and offline benchmarks: real HTTP on 127.0.0.1, scriptable replies,
injectable faults, a log of every request and the peak number of requests in flight, so tests exercise the real openai client end to end.
``delay_s`` is a fixed latency per request; ``concurrency`` (None: unbounded) makes the server answer at most that many
requests at once, the rest waiting their turn, as an endpoint with a concurrency limit does (for benchmarks).

Replies come from ``rules``: ``(substring, reply)`` pairs matched against the text of all messages (first match wins),
where ``reply`` is a string, a dict (sent as JSON text), a ``ToolCalls`` list, or a callable taking the request body.
Unmatched JSON-mode requests get the default verdict ``{"score": 1, "reason": "fake"}``; an unmatched request that
forces a tool call (``tool_choice`` ``"required"`` or a named function) calls that tool (or the first one) with ``{}``,
as a real server must, and so does one whose last user message names one of the offered tools (an
instruction-following model asked to use it) unless the last message is already a tool's result, which the reply
then quotes (``"fake answer: <result>"``, a model that uses it); others get ``"fake answer"``. A ``validator`` (a callable taking the
chat request body and returning a ``Fault`` or None) refuses requests before any rule is consulted, e.g. what a
reasoning API refuses.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclass
class Fault:
    """Answer the next matching request with an HTTP error (optionally a Retry-After header) or a delay."""

    status: int = 500
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    body: dict[str, Any] = field(default_factory=lambda: {"error": {"message": "injected fault", "type": "server_error"}})


@dataclass
class ToolCalls:
    """A reply that calls tools: ``[(name, arguments_dict), ...]``."""

    calls: list[tuple[str, dict[str, Any]]]


@dataclass
class CutReply:
    """A text reply the model stopped at its token limit (``finish_reason: "length"``)."""

    text: str


Reply = str | dict | ToolCalls | CutReply | Callable[[dict[str, Any]], Any]


def hashed_embedding(text: str, dim: int = 64) -> list[float]:
    """Deterministic bag-of-words hashing vector: texts sharing words get similar vectors."""
    v = [0.0] * dim
    for w in re.findall(r"[a-z0-9]+", text.lower()):
        h = int(hashlib.md5(w.encode()).hexdigest(), 16)
        v[h % dim] += 1.0 if (h >> 8) % 2 else -1.0
    n = sum(x * x for x in v) ** 0.5 or 1.0
    return [x / n for x in v]


def _forced_tool(body: dict[str, Any]) -> str | None:
    """The tool a request forces (``tool_choice`` "required" → the first tool, or the named function) or whose last
    user message names it, else None."""
    tools, choice = body.get("tools") or [], body.get("tool_choice")
    if not tools:
        return None
    if choice == "required":
        return str((tools[0].get("function") or {}).get("name", ""))
    if isinstance(choice, dict) and choice.get("type") == "function":
        return str((choice.get("function") or {}).get("name", ""))
    if choice in (None, "auto"):
        messages = body.get("messages", [])
        if messages and messages[-1].get("role") == "tool":  # it has the tool's result: it answers with it
            return None
        users = [m for m in messages if m.get("role") == "user"]
        last = str(users[-1].get("content") or "") if users else ""
        for t in tools:
            name = str((t.get("function") or {}).get("name", ""))
            if name and name in last:
                return name
    return None


class FakeOpenAI:
    """Start with ``with FakeOpenAI() as fake:``; ``fake.base_url`` is the ``/v1`` URL for the openai client."""

    def __init__(self, rules: list[tuple[str, Reply]] | None = None, delay_s: float = 0.0, embedding_dim: int = 64,
                 validator: Callable[[dict[str, Any]], "Fault | None"] | None = None, concurrency: int | None = None,
                 port: int = 0):
        self.port = port
        self.rules: list[tuple[str, Reply]] = list(rules or [])
        self.validator = validator
        #: the answer to every ``GET /models`` instead of the model list (e.g. a 401 for the preflight)
        self.models_fault: Fault | None = None
        self.faults: list[Fault] = []
        self.requests: list[dict[str, Any]] = []
        self.delay_s = delay_s
        self.embedding_dim = embedding_dim
        self.default_json: dict[str, Any] = {"score": 1, "reason": "fake"}
        self.default_text = "fake answer"
        #: the ``model`` every chat reply reports (None: the model asked for), as a server serving another would
        self.served_model: str | None = None
        #: the share of each prompt the fake reports as the provider's cached input (usage.prompt_tokens_details)
        self.cached_prompt_share = 0.0
        #: the share of each reply's completion tokens reported as hidden reasoning (completion_tokens_details)
        self.reasoning_share = 0.0
        #: the ``usage`` every chat reply reports instead of the counted one (an endpoint's odd counts), if set
        self.usage: dict[str, Any] | None = None
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(concurrency) if concurrency else None
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------------------------
    def start(self) -> "FakeOpenAI":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake._record("GET", self.path, None)
                if self.path.rstrip("/").endswith("/models") and fake.models_fault is not None:
                    self._send(fake.models_fault.status, fake.models_fault.body, fake.models_fault.headers)
                elif self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": "fake-model", "object": "model", "owned_by": "test"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                fake._record("POST", self.path, body)
                if fake._slots is not None:
                    fake._slots.acquire()
                with fake._lock:
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                try:
                    self._answer(body)
                finally:
                    with fake._lock:
                        fake.in_flight -= 1
                    if fake._slots is not None:
                        fake._slots.release()

            def _answer(self, body: dict[str, Any]) -> None:
                fault = fake._take_fault()
                if fault is not None:
                    if fault.delay_s:
                        time.sleep(fault.delay_s)
                    if fault.status:
                        self._send(fault.status, fault.body, fault.headers)
                        return
                if fake.delay_s:
                    time.sleep(fake.delay_s)
                if self.path.endswith("/chat/completions"):
                    refusal = fake.validator(body) if fake.validator is not None else None
                    if refusal is not None:
                        self._send(refusal.status, refusal.body, refusal.headers)
                        return
                    self._send(200, fake._chat(body))
                elif self.path.endswith("/embeddings"):
                    self._send(200, fake._embeddings(body))
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def _send(self, status: int, obj: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(obj).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeOpenAI":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    # -- scripting --------------------------------------------------------------------------------------------
    def add_rule(self, substring: str, reply: Reply) -> None:
        """The reply to a request whose messages contain ``substring`` (first matching rule wins; a callable that
        returns None passes the request on to the next rule, then to the defaults)."""
        self.rules.append((substring, reply))

    def fail_next(self, *faults: Fault) -> None:
        with self._lock:
            self.faults.extend(faults)

    def chat_requests(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests if r["path"].endswith("/chat/completions")]

    def reset_log(self) -> None:
        with self._lock:
            self.requests.clear()

    # -- internals --------------------------------------------------------------------------------------------
    def _record(self, method: str, path: str, body: dict[str, Any] | None) -> None:
        with self._lock:
            self.requests.append({"method": method, "path": path, "body": body, "t": time.time()})

    def _take_fault(self) -> Fault | None:
        with self._lock:
            return self.faults.pop(0) if self.faults else None

    def _reply_for(self, body: dict[str, Any]) -> Any:
        messages = body.get("messages", [])
        text = "\n".join(str(m.get("content") or "") for m in messages)
        for substring, reply in self.rules:
            if substring in text:
                out = reply(body) if callable(reply) else reply
                if out is not None:  # a callable rule returns None to leave the request to the next rule
                    return out
        if (body.get("response_format") or {}).get("type") == "json_object":
            return self.default_json
        forced = _forced_tool(body)
        if forced is not None:
            return ToolCalls([(forced, {})])
        last = (body.get("messages") or [{}])[-1]
        if last.get("role") == "tool":  # a model that was sent a tool's result uses it
            return f"{self.default_text}: {str(last.get('content') or '')[:200]}"
        return self.default_text

    def _chat(self, body: dict[str, Any]) -> dict[str, Any]:
        reply = self._reply_for(body)
        message: dict[str, Any] = {"role": "assistant", "content": None}
        finish = "stop"
        if isinstance(reply, ToolCalls):
            message["tool_calls"] = [
                {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                for i, (n, a) in enumerate(reply.calls)
            ]
            finish = "tool_calls"
        elif isinstance(reply, CutReply):
            message["content"] = reply.text
            finish = "length"
        else:
            message["content"] = reply if isinstance(reply, str) else json.dumps(reply)
        prompt_tokens = sum(len(str(m.get("content") or "").split()) for m in body.get("messages", []))
        completion_tokens = len(str(message.get("content") or "").split()) or 1
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
        if body.get("logprobs"):
            toks = str(message.get("content") or "").split() or [""]
            choice["logprobs"] = {"content": [
                {"token": t, "logprob": -0.1 * (i + 1), "bytes": None,
                 "top_logprobs": [{"token": t, "logprob": -0.1 * (i + 1), "bytes": None}]}
                for i, t in enumerate(toks)
            ]}
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": self.served_model or body.get("model", "fake-model"),
            "choices": [choice],
            "usage": self.usage if self.usage is not None else {
                "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
                **({"prompt_tokens_details": {"cached_tokens": int(prompt_tokens * self.cached_prompt_share)}}
                   if self.cached_prompt_share else {}),
                **({"completion_tokens_details": {"reasoning_tokens": int(completion_tokens * self.reasoning_share)}}
                   if self.reasoning_share else {})},
        }

    def _embeddings(self, body: dict[str, Any]) -> dict[str, Any]:
        inputs = body.get("input")
        inputs = [inputs] if isinstance(inputs, str) else list(inputs)
        dim = body.get("dimensions") or self.embedding_dim
        return {
            "object": "list",
            "data": [{"object": "embedding", "index": i, "embedding": hashed_embedding(t, dim)} for i, t in enumerate(inputs)],
            "model": body.get("model", "fake-embed"),
            "usage": {"prompt_tokens": sum(len(t.split()) for t in inputs), "total_tokens": sum(len(t.split()) for t in inputs)},
        }


def main(argv: list[str] | None = None) -> None:
    """``python -m inmind_exp.testing.fake_openai [--port P] [--delay-s S]``: a fake endpoint on 127.0.0.1 for a demo
    run (``llm=vllm llm.base_url=<printed URL> llm.model=fake``) until Ctrl-C; its numbers mean nothing."""
    import argparse
    import signal

    ap = argparse.ArgumentParser(prog="python -m inmind_exp.testing.fake_openai", description=main.__doc__)
    ap.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (0: any free port; default 8765)")
    ap.add_argument("--delay-s", type=float, default=0.05, help="latency of every reply in seconds (default 0.05)")
    args = ap.parse_args(argv)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})  # sigwait receives them
    f = FakeOpenAI(delay_s=args.delay_s, port=args.port).start()
    print(f"fake OpenAI-compatible server at {f.base_url} (Ctrl-C stops it)", flush=True)
    signal.sigwait({signal.SIGINT, signal.SIGTERM})
    f.stop()


if __name__ == "__main__":
    main()
