"""Every registered target (and its node transport) implements the whole declared protocol,
with the protocol's own parameters; and nothing outside skyinfra/targets/ looks a verb up by
name or branches on a target's name. A new target (the SSH one next) passes these unchanged."""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

import pytest

from skyinfra.errors import UnsupportedByTarget
from skyinfra.spec import validate_spec
from skyinfra.target_registry import TARGETS
from skyinfra.targets import get_target
from skyinfra.targets.base import Target
from skyinfra.targets.local.transport import LocalTransport
from skyinfra.topology import Node, Topology
from skyinfra.transport.base import NodeTransport
from skyinfra.transport.ssh import SshTransport
from skyinfra.workspace import Workspace

PACKAGE = Path(__file__).resolve().parents[2] / "skyinfra"
# One transport class per target (its ``transport`` verb's return type).
TRANSPORTS = {"local": LocalTransport, "aws": SshTransport, "ssh": SshTransport}


def _members(protocol: type) -> list[str]:
    """The members a protocol declares, its bases' included (methods and class variables)."""
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls is object or not getattr(cls, "_is_protocol", False) or cls is typing.Protocol:
            continue
        names |= {n for n in vars(cls) if not n.startswith("_")}
        names |= {n for n in getattr(cls, "__annotations__", {}) if not n.startswith("_")}
    return sorted(names)


def _implemented_by(cls: type, name: str) -> bool:
    """``name`` is defined by ``cls`` or a base that is not a protocol (a protocol's own stub
    would answer None for a verb the target never wrote)."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return not getattr(klass, "_is_protocol", False)
    return False


def _parameters(func: object) -> list[tuple[str, object]]:
    return [(p.name, p.kind) for p in inspect.signature(func).parameters.values()]  # type: ignore[arg-type]


def test_the_protocols_declare_every_verb_generic_code_calls() -> None:
    verbs = set(_members(Target))
    for verb in ("launch", "spot_prices", "status_details", "node_installs", "applies_as_is",
                 "head_recovery", "shell", "ssh_config", "interrupt_node", "checkpoint_sets",
                 "checkpoint_set", "delete_checkpoint_set", "transport", "after_down",
                 "plan_ladder", "climb_reviewed"):  # fmt: skip
        assert verb in verbs
    assert {"close", "node_gone"} <= set(_members(NodeTransport))


@pytest.mark.parametrize("name", list(TARGETS))
def test_every_registered_target_implements_the_whole_protocol(name: str) -> None:
    target = get_target(name)
    cls = type(target)
    missing = [m for m in _members(Target) if not _implemented_by(cls, m)]
    assert missing == [], f"target {name!r} lacks {missing}"
    assert isinstance(target, Target)  # its declaration's members included
    for member in _members(Target):
        declared = getattr(Target, member, None)
        if callable(declared) and not isinstance(declared, type):
            assert _parameters(getattr(cls, member)) == _parameters(declared), (name, member)


@pytest.mark.parametrize("name", list(TARGETS))
def test_every_targets_transport_implements_the_whole_protocol(name: str) -> None:
    cls = TRANSPORTS[name]
    missing = [m for m in _members(NodeTransport) if not _implemented_by(cls, m)]
    assert missing == [], f"{cls.__name__} lacks {missing}"
    for member in _members(NodeTransport):
        assert _parameters(getattr(cls, member)) == _parameters(getattr(NodeTransport, member))
    assert isinstance(LocalTransport({}), NodeTransport)


def test_a_verb_the_local_target_cannot_do_says_so_with_its_name(tmp_path: Path) -> None:
    spec = validate_spec({"name": "c"})
    topology = Topology(
        "c", "local", "127.0.0.2", 29500, (Node(0, "node-0", "127.0.0.2", None, None),)
    )
    target = get_target("local")
    with pytest.raises(UnsupportedByTarget) as err:
        target.ssh_config(Workspace(tmp_path / "c"), spec, topology, echo=print)
    assert (err.value.target, err.value.verb, err.value.exit_code) == ("local", "ssh_config", 2)
    assert "the local target's nodes have no SSH" in str(err.value)


def _generic_modules() -> list[Path]:
    """What drives the targets without being one: everything outside skyinfra/targets/."""
    return sorted(p for p in PACKAGE.rglob("*.py") if "targets" not in p.relative_to(PACKAGE).parts)


def _is_provider(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "provider") or (
        isinstance(node, ast.Name) and node.id == "provider"
    )


def _names_a_target(node: ast.expr) -> bool:
    """A string literal, or a tuple, list or set of them: a target's name written out."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    return isinstance(node, ast.Tuple | ast.List | ast.Set) and any(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
    )


def name_branches(source: str) -> list[int]:
    """Lines that compare a provider with a target's name written out (``spec.provider ==
    "aws"``, ``provider in ("local", ...)``); comparing two providers is no such branch."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_provider(s) for s in sides) and any(_names_a_target(s) for s in sides):
                lines.append(node.lineno)
    return lines


def verb_lookups(source: str, verbs: set[str]) -> list[int]:
    """Lines that look a declared verb up by name: ``getattr(x, "launch", ...)``,
    ``hasattr(x, "close")``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in verbs
        ):
            lines.append(node.lineno)
    return lines


def test_the_scans_find_what_they_look_for() -> None:
    verbs = {"launch", "close"}
    assert name_branches('if spec.provider == "aws": pass') == [1]
    assert name_branches('x = provider in ("local", "aws")') == [1]
    assert name_branches("x = previous.provider != spec.provider") == []
    assert verb_lookups('f = getattr(target, "launch", None)', verbs) == [1]
    assert verb_lookups('f = getattr(transport, "close")\nhasattr(t, "close")', verbs) == [1, 2]
    assert verb_lookups('getattr(section, "region", None)', verbs) == []


def _targets_own_methods() -> set[str]:
    """Every public method a registered target defines, declared or not: one looked up by
    name (``getattr(target, "plan_ladder", None)``) is a verb the protocol should declare."""
    return {
        name
        for target in TARGETS
        for klass in type(get_target(target)).__mro__
        for name, value in vars(klass).items()
        if callable(value) and not name.startswith("_")
    }


def test_no_generic_module_branches_on_a_targets_name_or_looks_a_verb_up() -> None:
    verbs = set(_members(Target)) | set(_members(NodeTransport)) | _targets_own_methods()
    assert {"climb_reviewed", "plan_ladder", "launch"} <= verbs
    found = []
    for path in _generic_modules():
        source = path.read_text(encoding="utf-8")
        where = path.relative_to(PACKAGE.parent)
        found += [f"{where}:{line}: branch on a target's name" for line in name_branches(source)]
        found += [f"{where}:{line}: verb looked up by name" for line in verb_lookups(source, verbs)]
        found += [
            f"{where}:{i}: type: ignore on a target's verb"
            for i, text in enumerate(source.splitlines(), 1)
            if "# type: ignore" in text and "target." in text
        ]
    assert found == []
