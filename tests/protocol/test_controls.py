"""The mismatched-fact pairing (issue #22 negative controls): deterministic and seeded, never a task with itself or
its own domain, chosen among the least similar candidates, partners spread; and the over-application judge is a
registered control judge that runs through the real client against the fake server."""

from __future__ import annotations

import random

import numpy as np
import pytest

from inmind_exp.protocol.controls import Pairing, mismatched_fields, mismatched_pairs, pair_text, tfidf_similarity
from inmind_exp.data.tasks import load_tasks
from inmind_exp.protocol.judges import CONTROL_JUDGES, JUDGES, OVER_APPLICATION_JUDGE, judge
from inmind_exp.llm import Endpoint, LLMClient
from inmind_exp.records import Answer, Message, Task
from tests.fake_openai import FakeOpenAI


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    return load_tasks()  # the bundled set: ten domains


def test_pairing_is_deterministic_order_free_and_seeded(tasks):
    first = mismatched_pairs(tasks, seed=0)
    shuffled = list(tasks)
    random.Random(5).shuffle(shuffled)
    assert mismatched_pairs(shuffled, seed=0) == first
    assert [p.task_id for p in first] == sorted(t.id for t in tasks)
    assert mismatched_pairs(tasks, seed=1) != first  # the seed matters


def test_never_itself_nor_its_own_domain(tasks):
    domain = {t.id: t.domain for t in tasks}
    for seed in range(5):
        for p in mismatched_pairs(tasks, seed=seed):
            assert p.partner_id != p.task_id
            assert p.partner_domain != p.domain == domain[p.task_id]
            assert domain[p.partner_id] == p.partner_domain


def test_partners_are_among_the_least_similar(tasks):
    ordered = sorted(tasks, key=lambda t: t.id)
    index = {t.id: i for i, t in enumerate(ordered)}
    sim = tfidf_similarity([pair_text(t) for t in ordered])
    pairs = mismatched_pairs(tasks, seed=0, pool=5)
    for p in pairs:
        i = index[p.task_id]
        others = sorted(float(sim[i, j]) for j, t in enumerate(ordered) if t.domain != ordered[i].domain)
        # within the 5 least similar of the other domains (the similarity is recorded to 6 decimals)
        assert p.similarity <= others[4] + 1e-6
    mean_pair = np.mean([p.similarity for p in pairs])
    mean_all = np.mean([sim[i, j] for i in range(len(ordered)) for j in range(len(ordered))
                        if ordered[i].domain != ordered[j].domain])
    assert mean_pair < mean_all  # lower than a random cross-domain pairing
    uses = np.bincount([index[p.partner_id] for p in pairs], minlength=len(ordered))
    assert uses.max() <= 3  # spread: no task is everyone's partner


def test_pool_of_one_takes_the_least_similar_under_a_given_similarity():
    ts = [Task(f"t{i}", d, f"fact {i}", "ok", "q?", f"query {i}", f"bridge {i}")
          for i, d in enumerate(["a", "a", "b", "c"])]
    sim = np.array([[1, .9, .2, .1], [.9, 1, .3, .4], [.2, .3, 1, .5], [.1, .4, .5, 1]])
    pairs = {p.task_id: p.partner_id for p in mismatched_pairs(ts, pool=1, similarity=lambda _: sim)}
    assert pairs["t0"] == "t3"
    assert pairs["t2"] == "t0" and pairs["t3"] == "t0" and pairs["t1"] == "t2"


def test_bad_inputs_are_refused():
    one = [Task("x", "a", "f", "ok", "q", "q", "e"), Task("y", "a", "f", "ok", "q", "q", "e")]
    with pytest.raises(ValueError, match="'x' .*no task of another domain"):
        mismatched_pairs(one)
    with pytest.raises(ValueError, match="duplicate task id"):
        mismatched_pairs([one[0], one[0]])
    assert Pairing("a", "d", "b", "e", 0.1).to_dict()["partner_id"] == "b"


def test_over_application_is_a_control_judge_not_a_task_judge(tasks):
    assert CONTROL_JUDGES["over_application"] is OVER_APPLICATION_JUDGE
    assert "over_application" not in JUDGES  # runs without controls keep their judges and result identity
    t, p = tasks[0], tasks[-1]
    answer = Answer("Here is a smoothie recipe.", (Message("user", "memory: " + t.user_message),))
    rule = ("a request the fact does not bear on", {"score": 0, "reason": "served the request"})
    with FakeOpenAI(rules=[rule]) as fake:
        client = LLMClient(Endpoint(role="judge", base_url=fake.base_url, model="fake", max_attempts=1))
        v = judge(client, OVER_APPLICATION_JUDGE, mismatched_fields(t, p, answer))
        body = fake.chat_requests()[0]
    assert v.ok and v.score == 0 and v.prompt_version == "over_application-v1"
    prompt = body["messages"][1]["content"]
    assert p.query in prompt and t.user_message in prompt and t.query not in prompt
