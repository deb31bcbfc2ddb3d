"""The copies of job records a workspace keeps (runs/<id>/job.json): what `jobs` lists after
`down` has taken the head's records with the cluster."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from skyinfra_runtime.jobrecord import JobRecord

# The copy of the job's record (from the head) in runs/<id>/.
JOB_COPY = "job.json"


def keep_job_copies(runs_dir: Path, jobs: Sequence[JobRecord]) -> None:
    """Each job's record as the head has it now, into the copy a `run` from this workspace
    keeps (runs/<id>/job.json): `down` takes the head's records with the cluster, and a
    detached job's copy was last written when it started."""
    for job in jobs:
        folder = runs_dir / job.id
        if not folder.is_dir():  # started from another workspace
            continue
        kept = replace(job, checked_at=None)  # the head's clock, now
        _write_copy(folder / JOB_COPY, kept.to_dict())


def mark_ended_by_down(runs_dir: Path, job_ids: Sequence[str]) -> None:
    """The kept copies of the running jobs `down` ends with the cluster say so."""
    for job_id in job_ids:
        copy = runs_dir / job_id / JOB_COPY
        try:
            kept = JobRecord.from_dict(json.loads(copy.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
        _write_copy(copy, replace(kept, ended_by_down=True).to_dict())


def _write_copy(path: Path, record: Mapping[str, Any]) -> None:
    # Per writer: an attached run following the job and `jobs` may both keep its copy.
    part = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.part")
    try:
        part.write_text(json.dumps(record, indent=2), encoding="utf-8")
        part.replace(path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
