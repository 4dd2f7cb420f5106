"""Every frozen record the pipeline passes on, each with a plain-dict round trip, so records cross Ray and land in
JSONL unchanged; import them from here. ``results`` holds the tasks, the trace, verdicts, usage and the per-task
``TaskRecord`` (with ``RECORD_SCHEMA_VERSION`` and JSONL writing); ``answers`` what a memory system shows and an LLM
sees: messages, context items, faults and answers."""

from inmind_exp.records.answers import Answer, ContextItem, Fault, Message, msgs
from inmind_exp.records.results import (ACCEPTED_DOMAINS, DOMAINS, FACT_REPLY_TURN_ID, FACT_TURN_ID, OFFICIAL_DOMAINS,
                                        ORIGINS, RECORD_SCHEMA_VERSION, ControlResult, InjectionSpec, Session, Task,
                                        TaskRecord, Trace, Turn, Usage, Verdict, astuple_usage, write_jsonl)

__all__ = ["ACCEPTED_DOMAINS", "DOMAINS", "FACT_REPLY_TURN_ID", "FACT_TURN_ID", "OFFICIAL_DOMAINS", "ORIGINS",
           "RECORD_SCHEMA_VERSION", "Answer", "ContextItem", "ControlResult", "Fault", "InjectionSpec", "Message",
           "Session", "Task", "TaskRecord", "Trace", "Turn", "Usage", "Verdict", "astuple_usage", "msgs", "write_jsonl"]
