"""The ``baselines`` table (migration 0015): one row per recorded baseline, from the compacted
``<p>.baselines`` topic; the headline figures as columns, the whole profile as JSON."""

from __future__ import annotations

from rankscope.schemas.baselines import Baseline, JobProfile
from rankscope.sinks.columns import Column, TableSpec, str_map


def _profile_json(profile: JobProfile) -> str:
    return profile.model_dump_json()


BASELINE_TABLE = TableSpec(
    "baselines",
    Baseline,
    (
        "baseline_id",
        "name",
        "key",
        Column("recorded_ts_ns", "recorded_ts"),
        "recorded_by",
        Column("cluster", "profile.cluster"),
        Column("job_id", "profile.job_id"),
        Column("model", "profile.model_key.model"),
        Column("ranks", "profile.model_key.ranks"),
        Column("steps", "profile.steps"),
        Column("step_s", "profile.step.median_s"),
        Column("comm_share", "profile.comm_share"),
        Column("power_w_per_gpu", "profile.power_w_per_gpu"),
        Column("samples_per_s", "profile.samples_per_s"),
        Column("tokens_per_s", "profile.tokens_per_s"),
        Column("driver_version", "profile.config.driver_version"),
        Column("nccl_version", "profile.config.nccl_version"),
        Column("cuda_version", "profile.config.cuda_version"),
        Column("kernel", "profile.config.kernel"),
        str_map("nccl_env", "profile.config.nccl_env"),
        Column("profile_json", "profile", fix=_profile_json),
    ),
)
