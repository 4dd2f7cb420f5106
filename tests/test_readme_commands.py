"""Every command in README.md, the guide (docs/*.md) and analysis/README.md runs: each ```bash block is read from the
documents (a doc edit changes what is tested), and each command is either run against the fake OpenAI-compatible server or skipped
by one of the explicit rules in ``SKIP``.

How a command is run: in one shared workspace directory (so the default ``sqlite:///mlflow.db``, ``multirun/`` and
``runs/`` the commands name resolve there, and later commands see what earlier ones made), in document order, with
``python``/``.venv/bin/python`` replaced by this interpreter and ``launch.py`` by the repository's. ``launch.py``
commands get ``ENDPOINT_OVERRIDES`` appended (endpoint, tiny task file and trace, one task, one worker; Hydra lets
the last value of a key win), and sweeps of more than ``MAX_RUN_CONFIGS`` configurations are run with
``dry_run=true`` (every configuration composed, validated and planned, none executed). Inputs a document asks the
user to bring (``labels.jsonl``, ``my_tasks.jsonl``) are written into the workspace; ``PLACEHOLDERS`` get real
run references. Optional arguments in ``[...]`` are run with the brackets removed.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fake_openai import FakeOpenAI
from tests.launch_helpers import REPO, env, write_small_data

#: every test here runs the README's commands in subprocesses
pytestmark = pytest.mark.slow


def guide_pages() -> list[Path]:
    """docs/*.md in the order of mkdocs.yml's nav (a page's commands may use what an earlier page's made: the analysis
    page reads the runs the running page's commands logged), then any page the nav does not list."""
    import yaml

    def names(nav) -> list[str]:
        items = nav if isinstance(nav, list) else list(nav.values()) if isinstance(nav, dict) else [nav]
        return [n for item in items for n in (names(item) if isinstance(item, (list, dict)) else [item])]

    nav = [REPO / "docs" / n for n in names(yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"])]
    rest = sorted(set((REPO / "docs").glob("*.md")) - set(nav))
    return [p for p in [*nav, *rest] if p.exists()]  # docs/plugins.md comes from the plug-in lane


DOCS = (REPO / "README.md", *guide_pages(), REPO / "analysis" / "README.md")
MAX_RUN_CONFIGS = 6
TIMEOUT_S = 900

#: Commands that cannot run here, each with the reason. Everything else must match a rule in ``prepare``.
SKIP: tuple[tuple[str, str], ...] = (
    ("python3 -m venv", "creates the virtual environment; the test runs in the installed one"),
    ("pip install", "installs the package; the test runs in the installed environment"),
    ("-m pytest", "runs the test suite, which contains this test"),
    ("mlflow ui", "a long-running web server (docs/screenshots.py starts and photographs it)"),
    ("inmind_exp.testing.fake_openai", "starts the fake server until stopped; the test points every command at its own"),
    ("export OPENAI_API_KEY", "sets the API key; the test gives the fake server a fake OPENAI_API_KEY itself"),
    ("ray start", "starts a Ray node on this machine; tests/exec/test_cluster.py starts its own two-node cluster"),
    ("ray job submit", "needs a running Ray cluster with its job API; tests/exec/test_cluster.py runs launch.py on one"),
    ("cluster.address=HEAD_IP", "joins a multi-node Ray cluster; tests/exec/test_cluster.py runs this launch on two nodes"),
)


@dataclass(frozen=True)
class Command:
    doc: str
    line: int
    text: str

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def extract(md: Path) -> list[Command]:
    """Shell commands of the ```bash blocks: continuation lines joined, ``&&`` chains split, comments dropped."""
    out: list[Command] = []
    lines = md.read_text().splitlines()
    in_block, pending, start = False, "", 0
    for i, line in enumerate(lines, 1):
        if line.strip().startswith("```"):
            in_block = line.strip() == "```bash" if not in_block else False
            continue
        if not in_block:
            continue
        if not pending:
            start = i
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        if not full or full.startswith("#"):
            continue
        for part in full.split("&&"):
            argv = shlex.split(part, comments=True)
            if argv:
                out.append(Command(md.relative_to(REPO).as_posix(), start, shlex.join(argv)))
    return out


COMMANDS = [c for doc in DOCS for c in extract(doc)]


#: docs/plugins.md's commands need the example plug-in installed in a fresh environment
PLUGIN_PAGE = ("docs/plugins.md", "tests/memory/test_plugin_example.py installs the example in a fresh environment "
               "and runs this page's commands there")


def in_section(cmd: Command, title: str) -> bool:
    lines = (REPO / cmd.doc).read_text().splitlines()
    starts = [i for i, line in enumerate(lines, 1) if line.strip() == title]
    if not starts:
        return False
    end = next((i for i, line in enumerate(lines, 1) if i > starts[0] and line.startswith("## ")), len(lines) + 1)
    return starts[0] < cmd.line < end


def skip_reason(cmd: Command) -> str | None:
    if cmd.doc == PLUGIN_PAGE[0]:
        return PLUGIN_PAGE[1]
    for pattern, reason in SKIP:
        if pattern in cmd.text + " ":
            return reason
    return None


def n_configs(argv: list[str]) -> int:
    """Configurations a ``launch.py -m`` command expands to (product of comma-separated override values)."""
    if "-m" not in argv:
        return 1
    return math.prod(len(a.split("=", 1)[1].split(",")) for a in argv if "=" in a and not a.startswith("-"))


class Workspace:
    """The shared directory, fake server and tiny data every documented command runs against."""

    def __init__(self, root: Path, fake: FakeOpenAI):
        self.root, self.fake = root, fake
        self.tasks, self.trace = write_small_data(root / "_data", n_tasks=2, n_sessions=21)  # 42 user turns: 'middle'
        (root / "my_tasks.jsonl").write_text(self.tasks.read_text())
        self.env = {k: v for k, v in {**env(), "OPENAI_API_KEY": "sk-fake-for-readme-test"}.items()
                    if k != "MLFLOW_TRACKING_URI"}  # the documented default, sqlite:///mlflow.db in the workspace

    def endpoint_overrides(self, argv: list[str] | tuple[str, ...] = ()) -> list[str]:
        """The fake endpoint and the tiny data; a command on the official release keeps the release's data (from
        ``$INMIND_RELEASE``: skipped without it, failed under CI)."""
        data = [f"dataset.path={self.tasks}", f"trace.path={self.trace}"]
        preset = any(a.startswith("+preset=") for a in argv)  # every preset runs on the official release
        if preset or "dataset=official" in argv or "trace=official" in argv:
            from tests.conftest import require_release

            data = [d for d, group in zip(data, ("dataset", "trace")) if not preset and f"{group}=official" not in argv]
            data.append(f"dataset.release_dir={require_release().root}")
        return ["llm.provider=openai", f"llm.base_url={self.fake.base_url}", *data, "dataset.limit=1", "dataset.sample=null",
                "cluster.workers=1", "cluster.num_cpus=2", "llm.max_attempts=2", "llm.backoff_initial_s=0.01",
                "llm.backoff_max_s=0.05"]

    def labels_file(self) -> None:
        """``labels.jsonl`` in the format docs/analysis.md documents, pointing at a run the commands made."""
        example = re.search(r"```json\n(.*?)\n```", (REPO / "docs" / "analysis.md").read_text(), re.S)
        assert example, "docs/analysis.md no longer documents the label format in a ```json block"
        label = json.loads(example.group(1).splitlines()[0])
        runs = self.config_runs()
        assert runs, "no config run to label: the README's run commands made none"
        run = runs[0]
        label.update(run=run.data.tags["inmind.config_hash"], task_id=self.first_task_id())
        (self.root / "labels.jsonl").write_text(json.dumps(label) + "\n")

    def first_task_id(self) -> str:
        return json.loads(self.tasks.read_text().splitlines()[0])["id"]

    def config_runs(self) -> list:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=f"sqlite:///{self.root / 'mlflow.db'}")
        exp = client.get_experiment_by_name("inmind")
        if exp is None:
            return []
        return client.search_runs([exp.experiment_id], filter_string="tags.`inmind.kind` = 'config'")

    def judge_pair(self) -> list[str]:
        """Config hashes of two runs that differ only in the judge model (the README's judge sweep)."""
        runs = self.config_runs()
        by_label: dict[str, list] = {}
        for r in runs:
            # the label without its bracketed swept keys (``[judge.model=...]``): the configuration apart from the judge
            by_label.setdefault(r.data.tags["inmind.label"].split(" [")[0], []).append(r)
        for group in by_label.values():
            judges = {r.data.tags.get("inmind.judge_model") for r in group}
            if len(judges) >= 2:
                return [r.data.tags["inmind.config_hash"] for r in group[:2]]
        raise AssertionError("no two runs differing only in the judge model: the guide's judge sweep is missing")


#: Placeholders a document uses for values only a run can supply, and how the test fills them.
PLACEHOLDERS = {"RUN_A": lambda ws: ws.judge_pair()[0], "RUN_B": lambda ws: ws.judge_pair()[1],
                "DIR": lambda ws: str(ws.root / "audit_out")}


def prepare(cmd: Command, ws: Workspace) -> tuple[list[str], set[int]]:
    """The argv to run and the accepted exit codes; fails for a command no rule covers."""
    argv = [a.strip("[]") if (a.startswith("[") or a.endswith("]")) and not a.startswith("[{") else a
            for a in shlex.split(cmd.text)]
    argv = [PLACEHOLDERS[a](ws) if a in PLACEHOLDERS else a for a in argv]
    if Path(argv[0]).name.startswith("python"):
        argv[0] = sys.executable
    if len(argv) > 1 and argv[1] == "launch.py":
        argv[1] = str(REPO / "launch.py")
        argv += ws.endpoint_overrides(argv)
        if n_configs(argv) > MAX_RUN_CONFIGS:
            argv.append("dry_run=true")
        return argv, {0}
    if argv[1:3] == ["-m", "analysis"]:
        if "labels.jsonl" in argv:
            ws.labels_file()
        return argv, {0}
    if argv[1:4] == ["-m", "inmind_exp.data", "check"]:
        return argv, {0, 1}  # 1: the documented "flagged tasks" outcome
    if argv[1:4] == ["-m", "inmind_exp.data", "fetch"]:  # no network: the same fetch from the release copy
        from tests.conftest import require_release

        return argv + ["--from", str(require_release().root), "--dest", str(ws.root / "release")], {0}
    raise AssertionError(f"{cmd.id}: no rule runs or skips this README command: {cmd.text}\n"
                         f"add a rule to tests/test_readme_commands.py")


def test_commands_are_found_and_every_skip_is_a_listed_rule():
    texts = [c.text for c in COMMANDS]
    assert any("launch.py" in t and "-m" in t for t in texts) and any("-m analysis report" in t for t in texts)
    # the plug-in page's commands run in the plug-in example's own test (PLUGIN_PAGE), in a fresh environment
    skipped = {c.id + " " + c.text: skip_reason(c) for c in COMMANDS if skip_reason(c) and c.doc != PLUGIN_PAGE[0]}
    # exactly these kinds of commands are skipped, nothing that runs an experiment or an analysis
    assert all(not (("launch.py" in k and "ray job submit" not in k and "HEAD_IP" not in k) or "-m analysis" in k)
               for k in skipped), skipped
    assert {r for r in skipped.values()} <= {reason for _, reason in SKIP}
    # the -m sweep flag comes before the overrides (Hydra rejects `launch.py key=v -m ...`)
    for c in COMMANDS:
        argv = shlex.split(c.text)
        if "launch.py" in argv and "-m" in argv:
            assert all(i > argv.index("-m") for i, a in enumerate(argv) if "=" in a), f"{c.id}: {c.text}"


def test_the_full_benchmark_runs_on_the_official_data():
    """The guide's "full benchmark against a strong endpoint" (docs/running.md) runs the release's tasks and trace,
    never the bundled look-alikes (what its section's every launch.py command says)."""
    launches = [c for c in COMMANDS if in_section(c, "## The full benchmark against a strong endpoint")
                and "launch.py" in c.text]
    assert len(launches) == 3 and {c.doc for c in launches} == {"docs/running.md"}
    for c in launches:
        argv = shlex.split(c.text)
        assert "dataset=official" in argv and "trace=official" in argv, f"{c.id}: {c.text}"


def test_n_configs_counts_the_sweep():
    assert n_configs(["python", "launch.py", "-m", "system=a,b,c", "embedding=x,y"]) == 6
    assert n_configs(["python", "launch.py", "system=a"]) == 1


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    with FakeOpenAI() as fake:
        yield Workspace(tmp_path_factory.mktemp("readme"), fake)


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c.id for c in COMMANDS])
def test_readme_command_runs(cmd: Command, workspace: Workspace):
    reason = skip_reason(cmd)
    if reason:
        pytest.skip(f"{cmd.text}: {reason}")
    argv, ok = prepare(cmd, workspace)
    p = subprocess.run(argv, cwd=workspace.root, env=workspace.env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert p.returncode in ok, (f"{cmd.id}: `{cmd.text}` exited {p.returncode}\nran: {shlex.join(argv)}\n"
                                f"stdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}")
