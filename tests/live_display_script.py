"""Run one small configuration in process against a slow fake server with the project's console logging, so a test
can watch the console under a pseudo-terminal or a pipe (tests/display/test_live_display.py):
``python -m tests.live_display_script WORK_DIR RUN_PROGRESS``."""

from __future__ import annotations

import sys
from pathlib import Path

from inmind_exp.console import route_project_logs
from inmind_exp.plan.plan import plan_config
from inmind_exp.run.driver import run_plan
from inmind_exp.exec.executor import InProcessExecutor
from inmind_exp.run.resources import Resources
from tests.fake_openai import FakeOpenAI
from tests.exec.test_runner_ray import compose

work, mode = Path(sys.argv[1]), sys.argv[2]
route_project_logs()
with FakeOpenAI(delay_s=0.15) as fake:
    cfg = compose(work, fake.base_url, "system=backbone", "embedding=bm25", "run.progress_every_s=0.2",
                  f"run.progress={mode}")
    plan = plan_config(cfg, work / "root", work / "job")
    run_plan(plan, executor=InProcessExecutor(), resources=Resources())
print("END-OF-RUN", flush=True)
