"""Every frozen record the pipeline passes on, each with a plain-dict round trip, so records cross Ray and land in
JSONL unchanged; import them from here. ``inputs``: what a run reads (tasks, the trace's sessions and turns, the
injection point); ``answers``: what a memory system shows and an LLM sees (messages, context items with their
provenance, faults, answers); ``results``: what a run writes per task (verdicts, usage, control results, the
``TaskRecord``, JSONL)."""

from inmind_exp.records.answers import Answer, ContextItem, Fault, Message, msgs
from inmind_exp.records.inputs import (ACCEPTED_DOMAINS, DOMAINS, FACT_REPLY_TURN_ID, FACT_TURN_ID, OFFICIAL_DOMAINS,
                                       ORIGINS, InjectionSpec, Session, Task, Trace, Turn)
from inmind_exp.records.results import (RECORD_SCHEMA_VERSION, ControlResult, TaskRecord, Usage, Verdict, astuple_usage,
                                        write_jsonl)

__all__ = ["ACCEPTED_DOMAINS", "DOMAINS", "FACT_REPLY_TURN_ID", "FACT_TURN_ID", "OFFICIAL_DOMAINS", "ORIGINS",
           "RECORD_SCHEMA_VERSION", "Answer", "ContextItem", "ControlResult", "Fault", "InjectionSpec", "Message",
           "Session", "Task", "TaskRecord", "Trace", "Turn", "Usage", "Verdict", "astuple_usage", "msgs", "write_jsonl"]
