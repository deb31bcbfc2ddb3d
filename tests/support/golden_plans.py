"""Golden plan.md files: what `skyinfra plan` writes, compared after masking what differs on
every run (sha256 digests, workspace ids) and without the folded full plan (Terraform's own
text, with this machine's paths). SKYINFRA_UPDATE_GOLDEN=1 rewrites them."""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden" / "plans"
UPDATE_ENV = "SKYINFRA_UPDATE_GOLDEN"
_MASKS = (
    (re.compile(r"\b[0-9a-f]{64}\b"), "<sha256>"),
    (re.compile(r"\bws-[0-9a-f]{16}\b"), "ws-<id>"),
    (re.compile(r"\b(i|sg|vpc|subnet|eni|sgr)-[0-9a-f]{8,17}\b"), r"\1-<id>"),
)
# A node's user data differs between workspaces (the staged wheel's S3 key holds the
# workspace's random id; gzipped past 16 KB, so even its size moves): on its lines, the size
# and digest of a long value are not facts of the plan, that it changes is.
_LONG_VALUE = re.compile(r"\(\d+ characters, sha256 [0-9a-f]+…\)")
_FOLD = re.compile(r"<details><summary>Full plan</summary>.*?</details>\n", re.DOTALL)
# How much of the folded plan fits depends on that text too (the cut is tested in test_review).
_CUT_NOTE = re.compile(r"^_Full plan truncated to fit .*_\n", re.MULTILINE)


def normalized(text: str) -> str:
    text = _FOLD.sub("<details>(full plan)</details>\n", text)
    text = _CUT_NOTE.sub("", text)
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return "".join(
        _LONG_VALUE.sub("(<n> characters, sha256 <digest>…)", line)
        if "`user_data" in line
        else line
        for line in text.splitlines(keepends=True)
    )


def check_golden(name: str, text: str) -> None:
    """``text`` (a plan.md) equals tests/golden/plans/<name>.md once normalized."""
    path = GOLDEN_DIR / f"{name}.md"
    got = normalized(text)
    if os.environ.get(UPDATE_ENV) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got)
    assert path.is_file(), f"no golden file {path}; run with {UPDATE_ENV}=1 to write it"
    assert got == path.read_text(), f"{path} differs from plan.md:\n{got}"


def resource_changes(plan: dict[str, object]) -> list[tuple[str, list[str]]]:
    """(address, actions) of every resource change in a plan JSON, in Terraform's order."""
    changes = plan.get("resource_changes") or []
    assert isinstance(changes, list)
    return [(str(rc["address"]), list(rc["change"]["actions"])) for rc in changes]


def check_recorded_changes(name: str, out: Path) -> None:
    """The plan `skyinfra plan` just wrote to ``out`` changes the same resources in the same
    way as the recorded tests/golden/plans/<name>.plan.json.gz (skipped while re-recording)."""
    if os.environ.get(UPDATE_ENV) == "1":
        return
    today = resource_changes(json.loads((out / "plan.json").read_text()))
    plan, _ = recorded(name)
    assert today == resource_changes(plan), (
        f"the plan for {name} drifted from its recording; re-record with `make record-plans`"
    )


def record_plan(name: str, out: Path) -> None:
    """Keep what `skyinfra plan` wrote to ``out`` for replay: plan.json (gzip, it is large) and
    plan-meta.json, as tests/golden/plans/<name>.plan.json.gz and <name>.meta.json."""
    if os.environ.get(UPDATE_ENV) != "1":
        return
    plan = json.loads((out / "plan.json").read_text())
    data = json.dumps(plan, indent=1, sort_keys=True).encode()
    (GOLDEN_DIR / f"{name}.plan.json.gz").write_bytes(gzip.compress(data, 9, mtime=0))
    meta = json.loads((out / "plan-meta.json").read_text())
    spec = meta["spec"]
    for table in spec.values():
        if isinstance(table, dict) and "ssh_key" in table:
            table["ssh_key"] = "~/.ssh/id_ed25519"  # the test's temporary key: not a fact
    kept = {
        "spec": spec,
        "planfile_sha256": meta["planfile_sha256"],
        "providers": meta["summary"]["providers"],
    }
    if meta.get("spot_prices"):  # issue 26: the Spot prices the plan was reviewed with
        kept["spot_prices"] = meta["spot_prices"]
    (GOLDEN_DIR / f"{name}.meta.json").write_text(json.dumps(kept, indent=2) + "\n")


def recorded(name: str) -> tuple[dict[str, object], dict[str, object]]:
    """(plan JSON, plan-meta.json) recorded for ``name``."""
    plan = json.loads(gzip.decompress((GOLDEN_DIR / f"{name}.plan.json.gz").read_bytes()))
    meta = json.loads((GOLDEN_DIR / f"{name}.meta.json").read_text())
    return plan, meta
