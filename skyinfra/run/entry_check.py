"""`run`'s ENTRY, checked on the operator before anything is copied or started.

The forms are the runtime's (``path/to/script.py``, ``path/to/script.py:function``,
``package.module:function``), parsed by the runtime's own parser. Files are looked up in the
project (the directory that is copied), the entry's file is compiled (a syntax error
is refused with its file and line) and a function is looked for with ``ast``: the user's code
is never imported or run here. What cannot be known here (a module that is not in the
project: it may be installed on the nodes) is said and left to the node's own check.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Collection, Iterator
from pathlib import Path

from skyinfra_runtime.entry import Entrypoint
from skyinfra_runtime.errors import EntrypointError

from skyinfra.errors import UsageError
from skyinfra.transport.base import IgnoreFn

_UNKNOWN = "*"  # `from x import *`: any name may be defined


def check_entry(
    src: Path, entry: str, ignore: IgnoreFn, *, run_files: Collection[str] = ()
) -> list[str]:
    """UsageError when ENTRY cannot run from ``src``; else notes on what was not checked.
    A pickled call (``../call.pkl``) is the Python API's: it must be one of ``run_files``,
    the files the run puts beside work/."""
    try:
        parsed = Entrypoint.parse(entry)
    except EntrypointError as err:
        raise UsageError(f"ENTRY: {err}") from None
    if parsed.call:
        assert parsed.path is not None
        if parsed.path.parent.as_posix() == ".." and parsed.path.name in run_files:
            return []
        raise UsageError(
            f"ENTRY {entry!r}: a pickled call is what the Python API sends "
            "(skyinfra.Cluster.run); name a script, a module or a function instead"
        )
    if parsed.path is not None:
        rel = _script_in_project(src, parsed.path, entry)
    else:
        assert parsed.module is not None
        found = _module_in_project(src, parsed.module, entry, main=parsed.function is None)
        if found is None:
            return [
                f"entry module {parsed.module!r} is not in {src} (the directory copied to the "
                "nodes); the nodes must have it installed"
            ]
        rel = found
    _not_left_out(rel, ignore, entry)
    _compiles(src / rel, rel, entry)
    if parsed.function is None:
        return []
    return _check_function(src / rel, rel, parsed.function, entry)


def _compiles(file: Path, rel: str, entry: str) -> None:
    """Compile (never import or run) the entry's file with this Python: a syntax error is
    named with its file and line here, instead of failing on every node after the copy.
    compile() finds what ast.parse alone lets through ('return' outside a function)."""
    try:
        compile(file.read_bytes(), rel, "exec", dont_inherit=True)
    except SyntaxError as err:
        line = f" line {err.lineno}" if err.lineno else ""
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        raise UsageError(
            f"ENTRY {entry!r}: {rel}{line}: {err.msg} (compiled with Python {version} on this "
            "machine, not run; nothing was copied or started)"
        ) from None
    except ValueError as err:  # e.g. a null byte in the source
        raise UsageError(f"ENTRY {entry!r}: {rel} is not Python source: {err}") from None


def _script_in_project(src: Path, path: Path, entry: str) -> str:
    """The script's path relative to ``src``; it must be a file in the project."""
    if path.is_absolute():
        try:
            path = path.resolve().relative_to(src.resolve())
        except ValueError:
            raise UsageError(
                f"ENTRY {entry!r}: {str(path)!r} is outside {src}, the directory copied to the "
                "nodes; give a path relative to it"
            ) from None
    if not (src / path).is_file():
        raise UsageError(
            f"ENTRY {entry!r}: no file {path.as_posix()!r} in {src} (the directory copied to "
            "the nodes; run `skyinfra run` from your project's root)"
        )
    return path.as_posix()


def _module_in_project(src: Path, module: str, entry: str, *, main: bool = False) -> str | None:
    """The module's file relative to ``src``; None when its top-level package is not in the
    project at all (then it can only come from the nodes' environment)."""
    parts = module.split(".")
    top = parts[0]
    if not ((src / top).is_dir() or (src / f"{top}.py").is_file()):
        return None
    base = "/".join(parts)
    package = src / base
    if main and (package / "__init__.py").is_file() and not (package / "__main__.py").is_file():
        raise UsageError(
            f"ENTRY {entry!r}: {base}/ is a package without __main__.py; `-m` runs a module "
            f"(e.g. -m {module}.train) or a package's __main__.py, as `python -m` does"
        )
    # `-m package` runs package/__main__.py, as `python -m` does.
    for rel in (f"{base}.py", f"{base}/__main__.py" if main else f"{base}/__init__.py"):
        if (src / rel).is_file():
            return rel
    if (src / base).is_dir():  # a namespace package: importable, but holds no function
        raise UsageError(
            f"ENTRY {entry!r}: {base}/ in {src} is a directory without __init__.py; "
            "name a module (a .py file) in it"
        )
    raise UsageError(
        f"ENTRY {entry!r}: module {module!r} is not in the project: neither {base}.py nor "
        f"{base}/__init__.py exists in {src}"
    )


def _not_left_out(rel: str, ignore: IgnoreFn, entry: str) -> None:
    parts = rel.split("/")
    for i in range(len(parts)):
        prefix = "/".join(parts[: i + 1])
        if ignore(prefix):
            raise UsageError(
                f"ENTRY {entry!r}: {prefix!r} is left out of the copy (a default ignore "
                "pattern or .skyinfraignore); add `!" + prefix + "` to .skyinfraignore to send it"
            )


def _check_function(file: Path, rel: str, function: str, entry: str) -> list[str]:
    tree = ast.parse(file.read_bytes(), filename=rel)  # it compiled: it parses
    defined = dict(_top_level_names(tree.body))
    kind = defined.get(function)
    if kind is None and _UNKNOWN not in defined:
        functions = sorted(n for n, k in defined.items() if k == "def")
        hint = f" (its functions: {', '.join(functions)})" if functions else ""
        raise UsageError(f"ENTRY {entry!r}: {rel} defines no {function!r} at top level{hint}")
    if kind == "async def":
        raise UsageError(
            f"ENTRY {entry!r}: {function!r} in {rel} is `async def`; the runtime calls the "
            "function and does not await it: give a plain function (asyncio.run inside it)"
        )
    return []


def _top_level_names(body: list[ast.stmt]) -> Iterator[tuple[str, str]]:
    """(name, kind) for every name a module binds at top level, through if/try/with."""
    for node in body:
        if isinstance(node, ast.FunctionDef):
            yield node.name, "def"
        elif isinstance(node, ast.AsyncFunctionDef):
            yield node.name, "async def"
        elif isinstance(node, ast.ClassDef):
            yield node.name, "class"
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                name = alias.asname or alias.name.split(".")[0]
                yield name, "import"
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        yield sub.id, "assignment"
        elif isinstance(node, ast.If | ast.For | ast.While | ast.With | ast.Try):
            for block in ("body", "orelse", "finalbody"):
                yield from _top_level_names(getattr(node, block, []))
            for handler in getattr(node, "handlers", []):
                yield from _top_level_names(handler.body)
