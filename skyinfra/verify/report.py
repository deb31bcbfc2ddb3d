"""`skyinfra verify`'s result: one row per check, one column per node, and a verdict. Pure.

A check on a node passed (✓), failed (✗, with the reason) or does not apply there (-, such as
the GPU checks on a node without accelerators: shown as such, never counted as a pass).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["pass", "fail", "n/a"]
MARKS: dict[str, str] = {"pass": "✓", "fail": "✗", "n/a": "-"}
# A failure's reason in its cell is cut to this many characters; the full reasons follow the
# table, one line each.
CELL_REASON = 40
# How the reason of a check left out on purpose begins (an n/a that is not "does not apply":
# a job held what the check needs); the table says each such reason once.
NOT_CHECKED = "not checked: "


@dataclass(frozen=True)
class CheckResult:
    check: str
    node: int
    status: Status
    reason: str = ""


@dataclass
class VerifyReport:
    cluster: str
    # Node names, by index (the table's columns).
    nodes: tuple[str, ...]
    results: list[CheckResult] = field(default_factory=list)

    def checks(self) -> list[str]:
        """The check names in the order they first ran."""
        return list(dict.fromkeys(r.check for r in self.results))

    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "fail"]

    @property
    def ok(self) -> bool:
        return bool(self.results) and not self.failures()

    def node_name(self, index: int) -> str:
        return self.nodes[index] if 0 <= index < len(self.nodes) else f"node {index}"

    def cell(self, check: str, node: int) -> CheckResult | None:
        found = [r for r in self.results if r.check == check and r.node == node]
        return found[-1] if found else None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _cut(text: str, width: int) -> str:
    text = _one_line(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def _cell_text(result: CheckResult | None) -> str:
    if result is None:
        return ""  # deselected (-k) or not run on this node
    if result.status == "pass":  # a detail, such as which network NCCL uses
        return f"{MARKS['pass']} {_cut(result.reason, CELL_REASON)}".rstrip()
    if result.status == "n/a":
        return f"{MARKS['n/a']} n/a"
    return f"{MARKS['fail']} {_cut(result.reason, CELL_REASON)}".rstrip()


def verdict(report: VerifyReport) -> str:
    """One line: OK with the counts, or FAILED naming every failing check and its node."""
    passed = sum(1 for r in report.results if r.status == "pass")
    not_applicable = sum(1 for r in report.results if r.status == "n/a")
    if not report.results:
        return f"verify: FAILED: no check ran on cluster {report.cluster!r} (check -k)"
    failures = report.failures()
    if not failures:
        extra = f", {not_applicable} not applicable" if not_applicable else ""
        return (
            f"verify: OK: {passed} passed{extra}, on {len(report.nodes)} node(s) of "
            f"{report.cluster!r}"
        )
    named = ", ".join(f"{f.check} on {report.node_name(f.node)}" for f in failures)
    return f"verify: FAILED: {len(failures)} failure(s) on {report.cluster!r}: {named}"


def render_table(report: VerifyReport) -> str:
    """The table, the failures' full reasons, and the verdict, as text lines."""
    checks = report.checks()
    header = ["check", *report.nodes]
    rows = [
        [check, *(_cell_text(report.cell(check, i)) for i in range(len(report.nodes)))]
        for check in checks
    ]
    widths = [max(len(row[c]) for row in [header, *rows]) for c in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True))

    lines = [line(header).rstrip(), line(["-" * w for w in widths]).rstrip()]
    lines += [line(row).rstrip() for row in rows]
    left_out = dict.fromkeys(
        _one_line(r.reason)
        for r in report.results
        if r.status == "n/a" and r.reason.startswith(NOT_CHECKED)
    )
    if left_out:
        lines.append("")
        lines += [f"{MARKS['n/a']} {reason}" for reason in left_out]
    failures = report.failures()
    if failures:
        lines.append("")
        lines += [
            f"{MARKS['fail']} {report.node_name(f.node)} · {f.check}: {_one_line(f.reason)}"
            for f in failures
        ]
    lines += ["", verdict(report)]
    return "\n".join(lines) + "\n"


def to_json(report: VerifyReport) -> dict[str, Any]:
    """The machine-readable form (`skyinfra verify --json`)."""
    checks = []
    for check in report.checks():
        cells: dict[str, Any] = {}
        for i, name in enumerate(report.nodes):
            result = report.cell(check, i)
            if result is not None:
                cells[name] = {"status": result.status, "reason": result.reason}
        checks.append({"check": check, "nodes": cells})
    return {
        "cluster": report.cluster,
        "ok": report.ok,
        "nodes": list(report.nodes),
        "checks": checks,
        "failures": [
            {"check": f.check, "node": report.node_name(f.node), "reason": f.reason}
            for f in report.failures()
        ],
        "verdict": verdict(report),
    }
