"""The README's two-minute demo starts the fake server from the command line (#44 item 8): it binds the port it is
given on 127.0.0.1, answers with the latency it is given, says where it is, and Ctrl-C stops it."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.launch_helpers import REPO, env, sigint_default


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_the_fake_server_cli_takes_port_and_delay_and_stops_on_ctrl_c():
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "inmind_exp.testing.fake_openai", "--port", str(port),
                             "--delay-s", "0.3"], cwd=REPO, env=env(), stdout=subprocess.PIPE, text=True,
                            preexec_fn=sigint_default)
    try:
        line = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}/v1" in line
        body = json.dumps({"model": "fake", "messages": [{"role": "user", "content": "hi"}]}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        t0 = time.monotonic()
        with urllib.request.urlopen(request, timeout=10) as r:
            reply = json.loads(r.read())
        assert time.monotonic() - t0 >= 0.3  # --delay-s
        assert reply["choices"][0]["message"]["content"] == "fake answer"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
