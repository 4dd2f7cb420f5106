"""Each setting is stated once (#24 item 5): the frozen settings a ``Plan`` holds are generated from the Hydra
schemas, the LLM settings an ``Endpoint`` shares with ``llm.*`` take its defaults, and what a config sets reaches
the plan by field name, so a field added to one statement and not the other fails here."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ReadonlyConfigError

from inmind_exp.config.schema import ClusterConf, LLMConf, LocalServerConf, RoleConf, RunConf, TrackingConf
from inmind_exp.llm import CallPolicy, Endpoint
from inmind_exp.plan.plan import plan_config
from inmind_exp.config import settings as S
from tests.exec.test_runner_ray import compose

#: Endpoint fields that are resolved, not set by ``llm.*``: the role, the local server's cache id, extra body
RESOLVED = {"role", "cache_id", "extra_body"}


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING


@pytest.mark.parametrize("schema, frozen", [(RunConf, S.RunSettings), (ClusterConf, S.ClusterSettings),
                                            (TrackingConf, S.TrackingSettings),
                                            (LocalServerConf, S.LocalServerSettings)])
def test_the_frozen_settings_are_their_schema_frozen(schema, frozen):
    ours = {f.name: (typing.get_type_hints(frozen)[f.name], _default(f)) for f in dataclasses.fields(frozen)}
    theirs = {f.name: (typing.get_type_hints(schema)[f.name], _default(f)) for f in dataclasses.fields(schema)}
    assert ours == theirs
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(frozen(), next(iter(ours)), None)


def test_the_local_server_spec_adds_only_what_it_resolves():
    names = {f.name for f in dataclasses.fields(S.LocalServerSpec)}
    extra = names - {f.name for f in dataclasses.fields(LocalServerConf)}
    assert extra == {"model", "model_path", "roles"}
    spec = S.LocalServerSpec(model="m", model_path=None, roles=("judge",), n_ctx=4096)
    other = dataclasses.replace(spec, n_ctx=8192)
    assert spec.cache_id != other.cache_id and "ctx4096" in spec.cache_id  # derived, not a second field


def test_a_frozen_dataclass_cannot_be_the_hydra_schema():
    """Why the settings are generated rather than the schema frozen: OmegaConf makes a frozen dataclass read-only,
    so no group option or override could be merged into it (Hydra composes with ``merge_with``)."""
    node = OmegaConf.structured(S.TrackingSettings)
    with pytest.raises(ReadonlyConfigError):
        node.merge_with({"experiment": "x"})
    schema = OmegaConf.structured(TrackingConf)
    schema.merge_with({"experiment": "x"})
    assert schema.experiment == "x"


def test_endpoint_and_llm_state_each_shared_setting_once():
    llm = {f.name: _default(f) for f in dataclasses.fields(LLMConf)}
    endpoint = {f.name: _default(f) for f in dataclasses.fields(Endpoint)}
    assert set(endpoint) - RESOLVED <= set(llm), "an Endpoint field llm.* does not set"
    for key in set(endpoint) - RESOLVED - {"role", "base_url", "model"}:
        assert llm[key] == endpoint[key], f"llm.{key}'s default differs from Endpoint.{key}'s"
    assert {f.name for f in dataclasses.fields(RoleConf)} <= set(endpoint) & set(llm)
    assert all(_default(f) is None for f in dataclasses.fields(RoleConf))  # null: as llm
    assert set(S.ROLE_KEYS) | set(S.LLM_KEYS) == set(endpoint) - RESOLVED


def test_call_policy_takes_each_field_from_the_endpoint():
    ep = Endpoint(role="judge", base_url="http://h/v1/", model="m", max_concurrency=7, rpm=5.0, tpm=9.0,
                  max_attempts=3, backoff_initial_s=0.5, backoff_max_s=9.0)
    policy = CallPolicy.of(ep)
    assert {f.name: getattr(policy, f.name) for f in dataclasses.fields(CallPolicy)} == {
        "limit_key": "http://h/v1", "max_concurrency": 7, "rpm": 5.0, "tpm": 9.0, "max_attempts": 3,
        "backoff_initial_s": 0.5, "backoff_max_s": 9.0}


@pytest.mark.slow
def test_every_run_cluster_and_tracking_override_reaches_the_plan(tmp_path):
    cfg = compose(tmp_path, "http://127.0.0.1:9/v1", "system=backbone", "embedding=bm25", "run.max_usd=5",
                  "run.max_tokens=900", "run.progress=plain", "run.latency_s=3", "run.max_task_attempts=3",
                  "run.keep_workdirs=true", "cluster.tasks_per_worker=3", "cluster.address=auto",
                  "cluster.start_timeout_s=7", "+cluster.runtime_env.env_vars.A=1", "tracking.report_at_end=false",
                  "llm.roles.judge.temperature=0.5", "llm.rpm=30", "llm.roles.memory.max_tokens=64")
    plan = plan_config(cfg, tmp_path / "root", tmp_path / "job")
    run, cluster = plan.run, plan.cluster
    assert (run.max_usd, run.max_tokens, run.progress, run.latency_s) == (5.0, 900, "plain", 3.0)
    assert run.keep_workdirs is True
    assert isinstance(run.max_usd, float) and run.max_task_attempts == 3
    assert run.cache == "cluster" and run.cache_dir == str((tmp_path / "cache").resolve())  # resolved values
    assert (cluster.tasks_per_worker, cluster.address, cluster.start_timeout_s) == (3, "auto", 7.0)
    assert cluster.runtime_env == {"env_vars": {"A": 1}} and cluster.workers == 2
    assert plan.tracking.experiment == "test" and plan.tracking.report_at_end is False
    eps = plan.endpoints
    assert eps["judge"].temperature == 0.5 and eps["answerer"].temperature == 0.0
    assert eps["memory"].max_tokens == 64 and eps["judge"].max_tokens == cfg.llm.max_tokens != 64
    assert {e.rpm for e in eps.values()} == {30.0}
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.max_usd = 9  # type: ignore[misc]


def test_a_role_override_is_each_endpoint_field_made_nullable_once_per_role():
    from inmind_exp.config.schema import ROLE_KEYS, RolesConf
    from inmind_exp.llm.endpoint import ROLES

    hints, endpoint = typing.get_type_hints(RoleConf), typing.get_type_hints(Endpoint)
    assert tuple(hints) == ROLE_KEYS
    for key in ROLE_KEYS:  # Optional[X] of Endpoint's X (or X | None)
        own = set(typing.get_args(endpoint[key]) or (endpoint[key],))
        assert set(typing.get_args(hints[key])) == own | {type(None)}
    assert tuple(f.name for f in dataclasses.fields(RolesConf)) == ROLES


def test_the_composed_config_is_typed_once_and_never_written(release, tmp_path):
    from inmind_exp.config.resolve import as_config, select
    from inmind_exp.config.schema import Config
    from inmind_exp.data.release import TASKS
    from inmind_exp.errors import PlanError

    cfg = compose(tmp_path, "http://127.0.0.1:9/v1", "system=backbone", "embedding=bm25", "dataset=official",
                  "trace=official", "dataset.path=null", "trace.path=null", "dataset.limit=2",
                  f"dataset.release_dir={release.root}")
    before = OmegaConf.to_container(cfg, resolve=True)
    config = as_config(cfg)
    assert isinstance(config, Config) and as_config(config) is config
    assert isinstance(config.llm.roles.judge, RoleConf) and select(config, "llm.roles.judge.model") is None
    assert config.trace.release_dir == str(release.root)  # trace=official takes dataset.release_dir
    with pytest.raises(KeyError):
        select(config, "llm.roles.nobody")
    plan = plan_config(cfg, tmp_path / "root", tmp_path / "job")
    assert plan.system_params["answer_naive"] is True  # the backbone's official_params, in a derived config ...
    assert plan.params["system.params.answer_naive"] == "True"
    assert OmegaConf.to_container(cfg, resolve=True) == before  # ... never written into the caller's
    assert plan.release_dir == release.root and plan.dataset_path == release.path(TASKS)
    unset = compose(tmp_path, "http://127.0.0.1:9/v1", "llm=openai")
    OmegaConf.update(unset, "llm.model", "???")
    with pytest.raises(PlanError, match="llm.model"):
        as_config(unset)
