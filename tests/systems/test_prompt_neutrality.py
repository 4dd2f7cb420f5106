"""No prompt nudges a system toward the benchmark's facts: every prompt text of every registered memory system (and of
the shared answerer) is compared with every bundled task's ``user_message``, ``query``, ``naive_query`` and
``explanation``, and with the same fields of the official release's tasks (read at run time from ``INMIND_RELEASE``,
never copied into the repository: the test fails under ``CI=true`` when the release is missing and is skipped
elsewhere), and the test fails on anything close to one. Each task set is measured on its own (its own rare words).

What counts as prompt text: every module-level constant (UPPER_CASE name) holding a string, or strings inside
tuples/lists/dicts (one-shot passages, outputs, demonstrations, tool descriptions), rendered as the module defines it,
plus every other string literal of 40+ characters in the module's code (inline prompts), docstrings excluded. The
upstream prompt texts in ``systems/prompts/`` count as their system's: each system module imports them by name, and
a test checks that every text there is imported by a system module (so none escapes the check).
``inmind_exp/memory/answering.py`` (the shared answer prompt) is checked too; ``inmind_exp/protocol/judges.py`` is not, since judges
must see the fact. Each text is cut into paragraphs and sentences (its units).

Two measures, either one flags a (unit, task) pair:
  1. Embedding: MiniLM cosine between a unit and a task field >= ``COSINE_THRESHOLD`` (0.55).
  2. Keywords: a sentence and one task (its four fields together) share >= ``MIN_SHARED_RARE`` (2) rare content
     words, at least one of them from what the user says (``user_message`` or ``query``). Per sentence, since a long
     paragraph collects unrelated words by chance; anchored, since two ordinary words that only the task's
     explanation happens to use (upstream's Stanton passage: "peer-reviewed ... applications" against
     financial-06's "Medicaid reviews ... application") are no sign of the fact.
     Words are lower-cased, at least 5 letters, not stop words, with a light suffix stem ("intolerant" and
     "intolerance" -> "intoler"). A word is rare when at most ``RARE_TASK_DF`` (2) of the bundled tasks use it and
     it is not memory-system vocabulary, i.e. not used by the prompts of two or more different modules ("memory",
     "conversation", "context", "health" ... are shared by many systems and say nothing about a task).

Calibration (bundled tasks, 125; prompts of the nine systems at 0f886c0, before HippoRAG 2's fix): HippoRAG 2's
one-shot examples written about a user's asthma inhaler and a lactose-intolerant brother share {asthma, inhaler} with
task health_wellness-21 and {lactose, intolerant(, dairy)} with health_wellness-29 (keywords), and its QA one-shot's
marathon-training passage has cosine 0.67 with health_wellness-06's query (sourdough: 0.55 with
professional_career-06's); every other prompt stays at cosine <= 0.52 (Mem0's upstream "Monitor Health and Wellness
Preferences ..." category line, 0.519) and shares at most one rare word with any task. With upstream's Radio City and
Stanton one-shots (main at 0871a62) HippoRAG 2 passes both measures. ``test_detector_*`` pin this calibration on
fixed texts, independent of the modules' current state.
"""

from __future__ import annotations

import ast
import collections
import functools
import inspect
import re
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Iterable, Iterator

import numpy as np
import pytest

import inmind_exp.memory.answering
from inmind_exp.data.tasks import load_tasks
from inmind_exp.llm.embed import MiniLMEncoder
from inmind_exp.memory import SYSTEMS

COSINE_THRESHOLD = 0.55
MIN_SHARED_RARE = 2
RARE_TASK_DF = 2
TASK_FIELDS = ("user_message", "query", "naive_query", "explanation")
MIN_LITERAL_CHARS = 40

STOP_WORDS = frozenset("""
about above after again against all also among another any around because been before being below between both
could does doing down during each either every from further have having here herself himself into itself just
least more most much must myself never nothing often only other ought ourselves over same should since some
still such than that their theirs them themselves then there these they this those through under until very
what when where whether which while whom whose will with within without would your yours yourself yourselves
""".split())
SUFFIXES = ("ances", "ance", "ants", "ant", "ences", "ence", "ents", "ent", "ings", "ing", "ers", "er", "ed", "es", "s")
ABBREVIATIONS = re.compile(r"\b(Dr|Mr|Mrs|Ms|St|vs|etc|e\.g|i\.e)\.\s")


@dataclass(frozen=True)
class Unit:
    """One paragraph or sentence of a prompt text, and where it comes from."""

    module: str
    name: str
    text: str
    sentence: bool = True  # False for a paragraph of several sentences (checked by the embedding measure only)


# -- prompt collection ------------------------------------------------------------------------------------------

def modules_under_test() -> dict[str, ModuleType]:
    mods = {SYSTEMS.get(n).__module__: sys.modules[SYSTEMS.get(n).__module__] for n in SYSTEMS.names()}
    mods[inmind_exp.memory.answering.__name__] = inmind_exp.memory.answering
    return dict(sorted(mods.items()))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)


def _docstring_nodes(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def prompt_texts(module: ModuleType) -> list[tuple[str, str]]:
    """(name, text) of every prompt-like text of ``module``: rendered constants, then other long literals."""
    out: list[tuple[str, str]] = []
    for name, value in vars(module).items():
        if re.fullmatch(r"_?[A-Z][A-Z0-9_]*", name):
            out += [(name, s) for s in _strings(value) if " " in s.strip()]
    tree = ast.parse(inspect.getsource(module))
    docs = _docstring_nodes(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                and len(node.value) >= MIN_LITERAL_CHARS and " " in node.value:
            out.append((f"literal@{node.lineno}", node.value))
    return out


def split_units(text: str) -> list[tuple[str, bool]]:
    """(text, is_sentence): paragraphs (blank-line separated) and, for multi-sentence paragraphs, their sentences
    and lines."""
    units = []
    for para in (p.strip() for p in re.split(r"\n\s*\n", text)):
        if len(para.split()) < 3:
            continue
        protected = ABBREVIATIONS.sub(lambda m: m.group(0).replace(". ", ".\u00a0"), para)
        parts = [s.strip().replace("\u00a0", " ") for s in re.split(r"(?<=[.!?])\s+|\n", protected)]
        parts = [s for s in parts if len(s.split()) >= 3]
        units.append((para, len(parts) <= 1))
        if len(parts) > 1:
            units += [(s, True) for s in parts]
    return units


def collect_units(mods: dict[str, ModuleType]) -> list[Unit]:
    seen: dict[tuple[str, str], Unit] = {}
    for mod_name, mod in mods.items():
        for name, text in prompt_texts(mod):
            for u, sentence in split_units(text):
                seen.setdefault((mod_name, u), Unit(mod_name, name, u, sentence))
    return list(seen.values())


# -- the two measures ---------------------------------------------------------------------------------------------

def _stem(word: str) -> str:
    for suf in SUFFIXES:
        if word.endswith(suf) and len(word) - len(suf) >= 4:
            return word[: -len(suf)]
    return word


def content_words(text: str) -> set[str]:
    text = re.sub(r"\{[A-Za-z_]*\}", " ", text)  # template placeholders are not words of the prompt
    return {_stem(w) for w in re.findall(r"[a-z]+", text.lower()) if len(w) >= 5 and w not in STOP_WORDS}


@dataclass(frozen=True)
class Flag:
    measure: str
    unit: Unit
    task_id: str
    field: str
    score: float
    shared: tuple[str, ...] = ()

    def __str__(self) -> str:
        what = f"cosine {self.score:.3f} with {self.field}" if self.measure == "cosine" else \
            f"shares rare words {list(self.shared)}"
        return f"{self.unit.module}.{self.unit.name}: {self.unit.text[:110]!r} ~ task {self.task_id} ({what})"


class Detector:
    """Both measures against the bundled tasks; ``generic`` is the memory-system vocabulary (words of 2+ modules)."""

    def __init__(self, tasks, generic: set[str]):
        self.tasks = tasks
        self.generic = generic
        self.task_words = {t.id: set().union(*(content_words(getattr(t, f)) for f in TASK_FIELDS)) for t in tasks}
        self.said = {t.id: content_words(t.user_message) | content_words(t.query) for t in tasks}
        self.df = collections.Counter(w for ws in self.task_words.values() for w in ws)
        self.fields = [(t.id, f, getattr(t, f)) for t in tasks for f in TASK_FIELDS]
        self.encoder = MiniLMEncoder()
        self.field_vecs = self.encoder.encode([text for _, _, text in self.fields])

    def rare(self, words: set[str]) -> set[str]:
        return {w for w in words if self.df[w] <= RARE_TASK_DF and w not in self.generic}

    def flags(self, units: list[Unit]) -> list[Flag]:
        if not units:
            return []
        out: list[Flag] = []
        sims = self.encoder.encode([u.text for u in units]) @ self.field_vecs.T
        for i, u in enumerate(units):
            j = int(np.argmax(sims[i]))
            if sims[i, j] >= COSINE_THRESHOLD:
                out.append(Flag("cosine", u, self.fields[j][0], self.fields[j][1], float(sims[i, j])))
            if not u.sentence:
                continue
            rare = self.rare(content_words(u.text))
            for tid, words in self.task_words.items():
                shared = rare & words
                if len(shared) >= MIN_SHARED_RARE and shared & self.said[tid]:
                    out.append(Flag("keywords", u, tid, "all fields", float(len(shared)), tuple(sorted(shared))))
        return out


def memory_system_vocabulary(units: Iterable[Unit]) -> set[str]:
    by_word: dict[str, set[str]] = collections.defaultdict(set)
    for u in units:
        for w in content_words(u.text):
            by_word[w].add(u.module)
    return {w for w, mods in by_word.items() if len(mods) >= 2}


@functools.lru_cache(maxsize=1)
def _setup() -> tuple[Detector, tuple[Unit, ...]]:
    units = collect_units(modules_under_test())
    return Detector(load_tasks(), memory_system_vocabulary(units)), tuple(units)


@pytest.fixture(scope="module")
def detector() -> Detector:
    return _setup()[0]


@pytest.fixture(scope="module")
def official_detector(release) -> Detector:
    """Both measures against the official release's tasks (rare words counted over that task set)."""
    from inmind_exp.data.official import load_official_tasks

    tasks = load_official_tasks(release)
    assert len(tasks) >= 100, f"expected the release's task set, got {len(tasks)} tasks"
    return Detector(tasks, _setup()[0].generic)


# -- the test -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("module", list(modules_under_test()))
def test_no_prompt_is_close_to_a_bundled_task(module, detector):
    units = [u for u in _setup()[1] if u.module == module]
    assert units, f"no prompt text found in {module}"
    flags = detector.flags(units)
    assert not flags, f"{len(flags)} prompt unit(s) of {module} are close to bundled tasks:\n" + \
        "\n".join(f"  - {f}" for f in flags)


#: Flags on the official tasks raised by upstream's own texts, kept verbatim (issue #21: upstream's licences allow it
#: and neutrality does not require a change), not by any wording of ours: (module, start of the unit, task id,
#: measure) -> why it is no nudge toward that task's fact. Every entry must still be flagged (no stale entries).
UPSTREAM_OVERLAPS_OFFICIAL: dict[tuple[str, str, str, str], str] = {
    ("systems.mem0", "I am a software engineer.", "100", "cosine"):
        "Mem0's own few-shot example (\"Hi, my name is John. I am a software engineer.\" in USER_MEMORY_EXTRACTION_PROMPT "
        "and FACT_RETRIEVAL_PROMPT at 57f944e18), written for every deployment of Mem0",
    ("systems.memoryos", "Health Concern: Concern with physical health and lifestyle.", "57", "cosine"):
        "one of the 51 profile dimensions of MemoryOS's PERSONALITY_ANALYSIS_USER_PROMPT (1d71706): a category name",
    ("systems.memoryos", "Animal Concern: Concern for animals or pets.", "153", "cosine"):
        "one of the 51 profile dimensions of MemoryOS's PERSONALITY_ANALYSIS_USER_PROMPT (1d71706): a category name",
    ("systems.hipporag2", '{"fact": [["imperial river", "is located in", "florida"]', "125", "keywords"):
        "'united states' in the first DSPy demonstration of HippoRAG's filter (a river in Florida): a country name",
    ("systems.hipporag2", '{"fact":[["imperial river","is located in","florida"]', "125", "keywords"):
        "'united states' in the same demonstration's kept facts: a country name",
    ("systems.hipporag2", "Finding Nemo Theatrical release poster", "125", "keywords"):
        "'united states' in HippoRAG's QA one-shot passage (rag_qa_musique.py, the film's country): a country name",
}


def _upstream_overlap(flag: Flag) -> tuple[str, str, str, str] | None:
    for key in UPSTREAM_OVERLAPS_OFFICIAL:
        module, start, task_id, measure = key
        if (flag.unit.module, flag.task_id, flag.measure) == (module, task_id, measure) and \
                flag.unit.text.startswith(start):
            return key
    return None


@pytest.mark.parametrize("module", list(modules_under_test()))
def test_no_prompt_is_close_to_an_official_task(module, official_detector):
    """As for the bundled tasks, over the release's tasks; the only flags allowed are the listed coincidences of
    upstream's verbatim texts (each explained), and each of those must still occur."""
    units = [u for u in _setup()[1] if u.module == module]
    assert units, f"no prompt text found in {module}"
    flags = official_detector.flags(units)
    unexplained = [f for f in flags if _upstream_overlap(f) is None]
    assert not unexplained, f"{len(unexplained)} prompt unit(s) of {module} are close to official tasks:\n" + \
        "\n".join(f"  - {f}" for f in unexplained)
    seen = {_upstream_overlap(f) for f in flags}
    stale = [k for k in UPSTREAM_OVERLAPS_OFFICIAL if k[0] == module and k not in seen]
    assert not stale, f"listed upstream overlaps that no longer occur (remove them): {stale}"


#: The project's own prompts (no upstream text to follow): a list of kinds of facts in one of them would point the
#: system at the benchmark's domains, which the similarity measures above cannot see (a category word is no task's)
OWN_PROMPTS = ("systems.always_in_state", "systems.backbone", "systems.naive_rag", "inmind_exp.memory.answering")
#: Word stems naming each of the benchmark's domains (``inmind_exp.records.DOMAINS``)
DOMAIN_WORDS: dict[str, tuple[str, ...]] = {
    "health_wellness": ("health", "medical", "medicat", "allerg", "diet", "illness", "wellness"),
    "professional_career": ("career", "job", "professional", "workplace"),
    "relationships": ("relationship", "household", "family", "partner", "spouse"),
    "financial": ("financ", "money", "budget", "debt"),
    "personal_development": ("hobb", "learning", "goals"),
    "spirituality": ("belief", "religio", "faith", "spiritual", "practices"),
    "legal": ("legal", "lawyer", "court"),
    "consumer": ("purchas", "shopping"),
    "parenting": ("parent", "children", "child"),
}


def domains_named(text: str) -> list[str]:
    words = re.findall(r"[a-z]+", text.lower())
    return sorted(d for d, stems in DOMAIN_WORDS.items() if any(w.startswith(stems) for w in words))


def test_the_category_check_flags_a_list_of_domains():
    from inmind_exp.records import DOMAINS

    assert set(DOMAIN_WORDS) < set(DOMAINS)
    assert domains_named("everything about the user: household and relationships, work, health and medical facts, "
                         "constraints, beliefs and practices") == ["health_wellness", "relationships", "spirituality"]
    assert domains_named("Keep durable facts about the user; update facts that changed.") == []


@pytest.mark.parametrize("name", OWN_PROMPTS)
def test_the_projects_own_prompts_name_no_kind_of_fact(name):
    import importlib

    named = {const: d for const, text in prompt_texts(importlib.import_module(name)) if (d := domains_named(text))}
    assert not named, f"{name}: prompts naming the benchmark's domains: {named}"


def test_every_upstream_prompt_text_is_imported_by_a_system_module():
    """``systems/prompts/<name>.py`` holds upstream texts; each must be in a checked module's namespace (imported by
    name), or the measures above would never see it."""
    import importlib
    import pkgutil

    import systems.prompts

    checked = {id(v) for mod in modules_under_test().values() for v in vars(mod).values()}
    missing = []
    names = [m.name for m in pkgutil.iter_modules(systems.prompts.__path__)]
    assert {"mem0", "a_mem", "memoryos", "xmemory", "hipporag2", "a_rag"} <= set(names)
    for name in names:
        mod = importlib.import_module(f"systems.prompts.{name}")
        for const, value in vars(mod).items():
            if re.fullmatch(r"[A-Z][A-Z0-9_]*", const) and const != "PROMPTS_VERSION" and \
                    any(" " in s.strip() for s in _strings(value)) and id(value) not in checked:
                missing.append(f"systems.prompts.{name}.{const}")
    assert not missing, f"upstream prompt texts no system module imports (so unchecked): {missing}"


def test_every_registered_system_and_the_shared_answerer_are_covered():
    names = set(modules_under_test())
    assert "inmind_exp.memory.answering" in names and "inmind_exp.protocol.judges" not in names
    assert {SYSTEMS.get(n).__module__ for n in SYSTEMS.names()} <= names
    units = _setup()[1]
    # one-shot material that is not named *PROMPT* is collected too (e.g. Mem0's examples, A-RAG's tool texts)
    assert any("Inception and Interstellar" in u.text for u in units if u.module == "systems.mem0")
    assert any(u.name == "SHARED_ANSWER_SYSTEM" for u in units)


# -- the calibration, pinned on fixed texts ------------------------------------------------------------------------

TASK_LIKE = {  # HippoRAG 2's one-shot examples on main before sys-b's fix (systems/hipporag2.py, hipporag2-v1)
    "asthma NER passage": "2023/05/14 (Sun) 09:12\nuser: My daughter Lena starts at Brookfield Elementary in September, so "
                          "we are moving to Portland at the end of June. Her pediatrician, Dr. Okafor, told us to keep her "
                          "Flovent inhaler within reach during the drive because of her asthma.",
    "lactose QA passage": "2023/03/21 (Tue) 12:05\nuser: Tomas told me he is lactose intolerant, so I need to rethink the "
                          "dinner menu for his visit.",
    "marathon QA passage": "2023/02/14 (Tue) 21:30\nuser: I'm training for a half marathon in May and trying to run four "
                           "times a week.",
}
NEUTRAL = {  # upstream one-shots: HippoRAG's Radio City passage, Mem0's examples; a generic instruction
    "Radio City": "Radio City\nRadio City is India's first private FM radio station and was started on 3 July 2001. It "
                  "plays Hindi, English and regional songs. Radio City recently forayed into New Media in May 2008 with "
                  "the launch of a music portal - PlanetRadiocity.com that offers music related news, videos, songs, "
                  "and other music-related features.",
    "Mem0 examples": "Input: Hi, I am looking for a restaurant in San Francisco.\nInput: Yesterday, I had a meeting with "
                     "John at 3pm. We discussed the new project.\nInput: Hi, my name is John. I am a software engineer.",
    "Stanton": "He has written and edited over a forty books and over three hundered peer-reviewed journal papers on "
               "applications of the subject.",
    "instruction": "Read all the memories provided carefully and pay special attention to the timestamps.",
}


def _units(texts: dict[str, str]) -> list[Unit]:
    return [Unit("fixture", name, u, sentence) for name, text in texts.items() for u, sentence in split_units(text)]


def test_detector_flags_the_task_like_one_shots(detector):
    flags = detector.flags(_units(TASK_LIKE))
    by_example = collections.defaultdict(set)
    for f in flags:
        by_example[f.unit.name].add((f.measure, f.task_id))
    assert ("keywords", "health_wellness-21") in by_example["asthma NER passage"]  # asthma + inhaler
    assert ("keywords", "health_wellness-29") in by_example["lactose QA passage"]  # lactose + intolerant
    assert ("cosine", "health_wellness-06") in by_example["marathon QA passage"]  # running training, 0.67


def test_detector_passes_neutral_texts(detector):
    assert detector.flags(_units(NEUTRAL)) == []
