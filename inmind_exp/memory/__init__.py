"""The plug-in surface: everything a memory system needs, importable from here (``base``: the interface, the
registry and the provenance helpers; ``answering``: the shared answerers; ``traits``: what analysis reads from a
system's class; ``ranges``: parameter ranges)."""

from inmind_exp.memory.base import (ANSWER_MODES, KEEP_SHARE, KEEP_WORDS, SYSTEMS, CallProfile, Input, MemorySystem,
                                    Recall, content_words, kept_provenance, read_json, states, turn_pairs,
                                    union_sources, unusable_state, write_json)

__all__ = ["ANSWER_MODES", "KEEP_SHARE", "KEEP_WORDS", "SYSTEMS", "CallProfile", "Input", "MemorySystem", "Recall",
           "content_words", "kept_provenance", "read_json", "states", "turn_pairs", "union_sources", "unusable_state",
           "write_json"]
