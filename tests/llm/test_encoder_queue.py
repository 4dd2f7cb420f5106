"""The per-process MiniLM queue: tasks encoding at once in one worker share one model call per batch, each gets
exactly its own rows (the same vectors as encoding alone), and a failing batch fails each of its callers."""

from __future__ import annotations

import threading
import time

import numpy as np
from inmind_exp.llm.embed import MiniLMEncoder


def _encode_all(enc: MiniLMEncoder, groups: list[list[str]]) -> list[np.ndarray]:
    """Start one thread per group while the model is busy (its lock held), then let them run: they queue up."""
    out: list[np.ndarray | BaseException | None] = [None] * len(groups)

    def call(i: int) -> None:
        try:
            out[i] = enc.encode(groups[i])
        except BaseException as e:  # noqa: BLE001
            out[i] = e

    with enc._lock:
        threads = [threading.Thread(target=call, args=(i,)) for i in range(len(groups))]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while len(enc._queue) < len(groups) and time.monotonic() < deadline:
            time.sleep(0.01)
    for t in threads:
        t.join(60)
    return out  # type: ignore[return-value]


def test_concurrent_callers_share_one_batch_and_get_their_own_rows():
    groups = [[f"task {i} fact {j}: the user likes colour number {i * 10 + j}" for j in range(i + 1)] for i in range(6)]
    enc = MiniLMEncoder()
    got = _encode_all(enc, groups)
    assert enc.batches == 1  # six callers, one model call
    alone = MiniLMEncoder()  # a fresh encoder (no shared memo): each group on its own
    for g, v in zip(groups, got):
        assert isinstance(v, np.ndarray) and v.shape == (len(g), 384)
        np.testing.assert_allclose(v, alone.encode(g), atol=1e-5)
    assert alone.batches == len(groups)
    # rows are copies: changing one caller's vectors never changes another's
    got[0][:] = 0
    np.testing.assert_allclose(got[1], alone.encode(groups[1]), atol=1e-5)


def test_a_failing_batch_fails_each_caller_and_the_queue_goes_on():
    enc = MiniLMEncoder()
    real = enc.model.embed
    enc.model.embed = lambda texts, batch_size=None: (_ for _ in ()).throw(RuntimeError("model broke"))
    got = _encode_all(enc, [["a"], ["b"], ["c"]])
    assert all(isinstance(e, RuntimeError) and "model broke" in str(e) for e in got)
    enc.model.embed = real
    assert enc.encode(["a"]).shape == (1, 384)
    assert not enc._queue
