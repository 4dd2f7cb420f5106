"""The mismatched-fact pairing (issue #22 negative controls, issue #41 item 3): a seeded derangement within the
cross-domain rule (each task a partner exactly once where the domains allow), deterministic, never a task with
itself or its own domain, fixed over the full task set and restricted under a subset; the over-application judge
and the relevance screen are control judges that run through the real client against the fake server."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from inmind_exp.protocol.controls import (Pairing, control_spec, mismatched_fields, mismatched_pairs,
                                          relevance_fields)
from inmind_exp.data.tasks import load_tasks
from inmind_exp.protocol.judges import CONTROL_JUDGES, JUDGES, OVER_APPLICATION_JUDGE, RELEVANCE_JUDGE, judge
from inmind_exp.llm import Endpoint, LLMClient
from inmind_exp.records import Answer, Message, Task
from tests.fake_openai import FakeOpenAI


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    return load_tasks()  # the bundled set: ten domains


def _tasks(domains: list[str]) -> list[Task]:
    return [Task(f"t{i:02d}", d, f"fact {i}", "ok", "q?", f"query {i}", f"bridge {i}") for i, d in enumerate(domains)]


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


@pytest.mark.parametrize("sizes", [(46, 26, 16, 8, 7, 7, 5, 4, 3, 3), (5, 5), (3, 2, 1), (4, 1, 1, 1, 1)])
def test_each_task_is_a_partner_exactly_once_when_no_domain_holds_more_than_half(sizes):
    """The official domain sizes among them: the pairing is a permutation (a derangement across domains), so no
    partner's query serves several tasks (the TF-IDF pairing served 125 tasks with 59 partner queries)."""
    ts = _tasks([f"d{k}" for k, n in enumerate(sizes) for _ in range(n)])
    for seed in range(20):
        pairs = mismatched_pairs(ts, seed=seed)
        assert sorted(p.partner_id for p in pairs) == sorted(t.id for t in ts)
        assert all(p.domain != p.partner_domain for p in pairs)


def test_a_majority_domain_shares_the_others_and_every_task_gets_a_partner():
    ts = _tasks(["a"] * 5 + ["b", "c"])
    pairs = {p.task_id: p for p in mismatched_pairs(ts, seed=3)}
    assert len(pairs) == 7 and all(p.domain != p.partner_domain for p in pairs.values())
    uses = Counter(p.partner_id for p in pairs.values())
    # b and c each take an "a" task (two distinct ones); the five "a" tasks share b and c (3 and 2)
    assert sorted(uses[t] for t in ("t05", "t06")) == [2, 3]
    assert sum(uses[f"t0{i}"] for i in range(5)) == 2 and max(uses.values()) == 3


def test_a_subset_keeps_the_full_sets_partners_even_outside_the_subset(tasks):
    full = {p.task_id: p for p in mismatched_pairs(tasks, seed=0)}
    subset = tasks[:6]  # the head of the domain-sorted file: one domain only
    spec = control_spec(["mismatched"], subset, seed=0, universe=tasks)
    assert spec is not None and set(spec.pairings) == {t.id for t in subset}
    for t in subset:
        assert spec.pairings[t.id] == full[t.id]
        assert spec.partners[t.id].id == full[t.id].partner_id
    assert any(spec.partners[t.id].id not in {s.id for s in subset} for t in subset)
    with pytest.raises(ValueError, match="every task is of domain"):  # without the full set: no partner at all
        control_spec(["mismatched"], subset, seed=0)
    stranger = Task("zz", "other", "f", "ok", "q", "q", "e")
    with pytest.raises(ValueError, match="not in the full task set"):
        control_spec(["mismatched"], [stranger], universe=tasks)


def test_bad_inputs_are_refused():
    one = [Task("x", "a", "f", "ok", "q", "q", "e"), Task("y", "a", "f", "ok", "q", "q", "e")]
    with pytest.raises(ValueError, match="every task is of domain 'a'"):
        mismatched_pairs(one)
    with pytest.raises(ValueError, match="duplicate task id"):
        mismatched_pairs([one[0], one[0]])
    assert Pairing("a", "d", "b", "e").to_dict()["partner_id"] == "b"


def test_the_relevance_screen_sees_the_fact_and_the_partner_query_only(tasks):
    t, p = tasks[0], tasks[-1]
    assert "relevance" not in JUDGES and "relevance" not in CONTROL_JUDGES  # it scores no answer
    rule = ("[query] (the later request)", {"score": 1, "reason": "related"})
    with FakeOpenAI(rules=[rule]) as fake:
        client = LLMClient(Endpoint(role="judge", base_url=fake.base_url, model="fake", max_attempts=1))
        v = judge(client, RELEVANCE_JUDGE, relevance_fields(t, p))
        prompt = fake.chat_requests()[0]["messages"][1]["content"]
    assert v.ok and v.score == 1 and v.prompt_version == "relevance-v1"
    assert t.user_message in prompt and p.query in prompt
    assert t.query not in prompt and t.explanation not in prompt and p.user_message not in prompt


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


def test_the_relevance_prompt_names_no_kind_of_fact():
    """The screen is the project's own prompt: like the systems' own prompts (``test_prompt_neutrality``) it names
    none of the benchmark's domains, so it cannot steer the screen toward the benchmark's kinds of fact."""
    from tests.systems.test_prompt_neutrality import domains_named

    assert domains_named(RELEVANCE_JUDGE.system + "\n" + RELEVANCE_JUDGE.template) == []
    assert domains_named("a fact about the user's medication and diet") == ["health_wellness"]  # the check can fail
