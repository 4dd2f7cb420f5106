"""``dataset.sample=N``: a seeded random sample of N tasks stratified by domain, replacing ``dataset.limit`` (the
head of a domain-sorted file, health tasks only at any small limit), reproducible from its seed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from inmind_exp.data import DataError, load_tasks
from inmind_exp.config.schema import DatasetConf
from inmind_exp.config.sources import load_dataset
from inmind_exp.data.tasks import BUNDLED_TASKS, sample_tasks
from tests.launch_helpers import REPO


def test_a_sample_is_stratified_by_domain_seeded_and_in_file_order():
    tasks = load_tasks()
    share = Counter(t.domain for t in tasks)
    picked = sample_tasks(tasks, 20, seed=0, path=BUNDLED_TASKS)
    assert len(picked) == len({t.id for t in picked}) == 20
    got = Counter(t.domain for t in picked)
    for domain, n in share.items():  # each domain gets its share of 20, rounded down or up
        assert int(20 * n / len(tasks)) <= got[domain] <= int(20 * n / len(tasks)) + 1, domain
    order = {t.id: i for i, t in enumerate(tasks)}
    assert [order[t.id] for t in picked] == sorted(order[t.id] for t in picked)  # file order
    assert sample_tasks(tasks, 20, seed=0, path=BUNDLED_TASKS) == picked  # the same seed, the same tasks
    assert {t.id for t in sample_tasks(tasks, 20, seed=1, path=BUNDLED_TASKS)} != {t.id for t in picked}
    assert sample_tasks(tasks, len(tasks), seed=3, path=BUNDLED_TASKS) == tasks
    for bad in (0, len(tasks) + 1):
        with pytest.raises(DataError, match="dataset.sample"):
            sample_tasks(tasks, bad, seed=0, path=BUNDLED_TASKS)


def test_the_sample_replaces_the_limit_where_the_dataset_is_loaded():
    head = load_dataset(DatasetConf(limit=10)).tasks
    sampled = load_dataset(DatasetConf(limit=2, sample=10, sample_seed=7)).tasks
    assert len(head) == 10 and len({t.domain for t in head}) == 1  # the head of the file: one domain
    assert len(sampled) == 10 and len({t.domain for t in sampled}) >= 5  # the limit is ignored under a sample
    assert sampled == load_dataset(DatasetConf(sample=10, sample_seed=7)).tasks


def test_a_run_plans_the_sampled_tasks_and_logs_the_sample(tmp_path: Path):
    from hydra import compose, initialize_config_dir

    from inmind_exp.config.schema import register_configs
    from inmind_exp.plan.plan import plan_config
    from inmind_exp.tracking.params import RESULT_PARAM_KEYS

    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["llm=openai", "dataset.sample=12", "dataset.sample_seed=5",
                                           f"run.cache_dir={tmp_path / 'cache'}"])
    plan = plan_config(cfg, tmp_path / "root", tmp_path / "job")
    expected = sample_tasks(load_tasks(), 12, seed=5, path=BUNDLED_TASKS)
    assert [t.id for t in plan.tasks] == [t.id for t in expected]
    assert {"dataset.sample", "dataset.sample_seed"} <= set(RESULT_PARAM_KEYS)
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        bad = compose("config", overrides=["llm=openai", "dataset.sample=0", f"run.cache_dir={tmp_path / 'cache'}"])
    from inmind_exp.memory.ranges import check_settings, SETTING_RANGES

    problems = check_settings(lambda k: OmegaConf.select(bad, k, throw_on_missing=True), ("answerer",),
                              {"dataset.sample": SETTING_RANGES["dataset.sample"]})
    assert problems and "dataset.sample=0" in problems[0]
