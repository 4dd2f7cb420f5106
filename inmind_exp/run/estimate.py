"""The dry run: an upper bound on the calls and prompt tokens a plan still needs (cache hits not subtracted), from
the system's ``CallProfile``, the trace's shape and the registered judges that apply (``judges.applicable``)."""

from __future__ import annotations

import sys
from typing import Any, Sequence

from inmind_exp.judges import applicable
from inmind_exp.records import Session
from inmind_exp.run.plan import Plan


def _user_turns(sessions: Sequence[Session]) -> int:
    return sum(1 for s in sessions for t in s.turns if t.role == "user")


def estimate(plan: Plan, retry_errors: bool | None = None) -> dict[str, float]:
    """Upper-bound calls and prompt tokens of what remains to run (cache hits not subtracted)."""
    cost = plan.system_cls.cost
    remaining = plan.remaining(retry_errors)
    sessions = plan.trace.sessions
    j = plan.session_index
    prefix_calls = cost.memory_calls_per_user_turn * _user_turns(sessions[:j]) + cost.memory_calls_per_session * j
    suffix_calls = (cost.memory_calls_per_user_turn * (_user_turns(sessions[j:]) + 1)
                    + cost.memory_calls_per_session * (len(sessions) - j))
    queries = 2 if plan.system_cls.evaluates_naive else 1
    per_task_memory = suffix_calls + cost.memory_calls_per_query * queries
    per_task_answer = cost.answer_calls_per_query * queries
    judges = applicable(plan.system_cls.evaluates_naive)
    per_task_judge = len(judges)
    n = len(remaining)
    prefix_needed = n > 0 and not plan.prefix_path.is_file()
    memory_calls = n * per_task_memory + (prefix_calls if prefix_needed else 0)
    return {
        "tasks_total": len(plan.tasks),
        "tasks_to_run": n,
        "memory_calls": memory_calls,
        "answer_calls": n * per_task_answer,
        "judge_calls": n * per_task_judge,
        "prompt_tokens": memory_calls * cost.prompt_tokens_per_memory_call
        + n * per_task_answer * cost.prompt_tokens_per_answer_call + n * sum(j.prompt_tokens for j in judges),
    }


def print_estimate(plan: Plan, retry_errors: bool | None = None, out: Any = None) -> dict[str, float]:
    """Print the estimate (and its prompt-token cost when the answerer's model has a price) as the dry run's output."""
    est = estimate(plan, retry_errors)
    price = plan.prices.get(plan.endpoints["answerer"].model)
    cost = f", ~${est['prompt_tokens'] * price[0] / 1e6:,.2f} of prompt tokens" if price is not None else ""
    print(f"[dry run] {plan.name} (config {plan.config_hash}): {est['tasks_to_run']:.0f}/{est['tasks_total']:.0f} tasks to run; "
          f"~{est['memory_calls']:.0f} memory + {est['answer_calls']:.0f} answer + {est['judge_calls']:.0f} judge calls, "
          f"~{est['prompt_tokens'] / 1e6:.2f}M prompt tokens{cost} (upper bound: cache hits not subtracted)",
          file=out or sys.stdout, flush=True)
    return est
