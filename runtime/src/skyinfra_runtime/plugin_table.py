"""The plugin table: every plugin's name, options, their types, allowed values and defaults.

This is the one place that says which plugin options are valid. ``from_name`` (what the
launcher builds plugins with), the plugins' own constructors and the operator's spec all
check options here, and ``parse_plugin_flag`` is the one reading of ``NAME[:key=value,...]``.

Option values are JSON values: strings, numbers, booleans, lists and tables (a TOML spec
gives the same shapes), and they travel in ``topology.json`` as JSON. TOML has no null, so a
replicated dimension in a keras layout map may be written ``""``; it is normalised to
``None`` (JSON null) here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skyinfra_runtime.errors import PluginFlagError, PluginOptionError
from skyinfra_runtime.topology import PluginRef

FLAG_SYNTAX = "NAME[:key=value,...], e.g. keras:backend=jax or torch:backend=gloo,init_timeout=60"

# Checks one option's value: (plugin, option, value) -> the value to use, or PluginOptionError.
Check = Callable[[str, str, Any], Any]


@dataclass(frozen=True)
class Option:
    """One option of a plugin: its name, what is valid (in words), its default (in words)."""

    name: str
    expected: str
    default: str
    check: Check


@dataclass(frozen=True)
class PluginEntry:
    """One plugin: its options, and the checks that span several options."""

    name: str
    summary: str
    options: tuple[Option, ...]
    check_together: Callable[[Mapping[str, Any]], None] | None = None

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.options)


def _fail(plugin: str, key: str, value: Any, expected: str, message: str | None = None) -> None:
    raise PluginOptionError(
        message or f"plugin {plugin!r} option {key!r} is {value!r}; expected {expected}",
        field=f"options.{key}",
        value=value,
        expected=expected,
    )


# ------------------------------------------------------------------------- value checks

SECONDS = "a number of seconds > 0"


def _seconds(plugin: str, key: str, value: Any) -> Any:
    """A positive number; a numeric string is read too (as SKYINFRA_INIT_TIMEOUT is)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        _fail(plugin, key, value, SECONDS, f"{key} {value!r} is not a number of seconds")
    try:
        seconds = float(value)
    except ValueError:
        _fail(plugin, key, value, SECONDS, f"{key} {value!r} is not a number of seconds")
    if not seconds > 0:
        _fail(plugin, key, value, SECONDS, f"{key} must be > 0 seconds, got {value!r}")
    return value


def _bool(plugin: str, key: str, value: Any) -> Any:
    if not isinstance(value, bool):
        _fail(plugin, key, value, "true or false")
    return value


def _choice(choices: Sequence[str], *, allow_none: bool = False) -> Check:
    expected = f"one of {', '.join(choices)}"

    def check(plugin: str, key: str, value: Any) -> Any:
        if value is None and allow_none:
            return None
        if value not in choices:
            _fail(
                plugin,
                key,
                value,
                expected,
                f"{plugin} {key} {value!r} is not valid; expected {expected}",
            )
        return value

    return check


def _mesh_shape(plugin: str, key: str, value: Any) -> Any:
    expected = "a non-empty list of positive integers, e.g. [1, 2]"
    if (
        not isinstance(value, list | tuple)
        or not value
        or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in value)
    ):
        _fail(plugin, key, value, expected)
    return [int(n) for n in value]


def _axis_names(plugin: str, key: str, value: Any) -> Any:
    expected = 'a non-empty list of distinct axis names, e.g. ["batch", "model"]'
    if (
        not isinstance(value, list | tuple)
        or not value
        or any(not isinstance(a, str) or not a for a in value)
        or len(set(value)) != len(value)
    ):
        _fail(plugin, key, value, expected)
    return list(value)


def _layout_map(plugin: str, key: str, value: Any) -> Any:
    expected = (
        'a table of variable-path regex -> list of axis names, "" (or null) for a replicated'
        ' dimension, e.g. {".*dense/kernel" = ["", "model"]}'
    )
    if not isinstance(value, Mapping):
        _fail(plugin, key, value, expected)
    clean: dict[str, list[str | None]] = {}
    for pattern, axes in value.items():
        try:
            re.compile(pattern)
        except (re.error, TypeError) as err:
            _fail(plugin, f"{key}[{pattern!r}]", pattern, f"a regular expression ({err})")
        if not isinstance(axes, list | tuple) or any(
            a is not None and not isinstance(a, str) for a in axes
        ):
            _fail(plugin, f"{key}[{pattern!r}]", axes, expected)
        clean[pattern] = [a if a else None for a in axes]
    return clean


def _name(plugin: str, key: str, value: Any) -> Any:
    if not isinstance(value, str) or not value:
        _fail(plugin, key, value, "a non-empty axis name")
    return value


def _keras_together(options: Mapping[str, Any]) -> None:
    parallel = ("mesh_shape", "axis_names", "layout_map")
    given = [k for k in parallel if options.get(k) is not None]
    if given and len(given) != len(parallel):
        missing = next(k for k in parallel if k not in given)
        raise PluginOptionError(
            "keras model parallelism needs mesh_shape, axis_names and layout_map together",
            field=f"options.{missing}",
            value=None,
            expected="mesh_shape, axis_names and layout_map together (model parallelism)",
        )
    if not given:
        if options.get("batch_dim_name") is not None:
            raise PluginOptionError(
                "keras batch_dim_name is only used with model parallelism (mesh_shape, ...)",
                field="options.batch_dim_name",
                value=options["batch_dim_name"],
                expected=(
                    "batch_dim_name only with model parallelism (mesh_shape, axis_names and"
                    " layout_map)"
                ),
            )
        return
    backend = options.get("backend", "jax")
    if backend != "jax":
        raise PluginOptionError(
            "keras model parallelism is only available with backend='jax'",
            field="options.backend",
            value=backend,
            expected="jax (model parallelism runs on the JAX backend)",
        )
    shape, axes = options["mesh_shape"], options["axis_names"]
    if len(shape) != len(axes):
        raise PluginOptionError(
            f"keras mesh_shape {list(shape)} has {len(shape)} dimensions but axis_names"
            f" {list(axes)} names {len(axes)}",
            field="options.axis_names",
            value=list(axes),
            expected=f"{len(shape)} axis names, one per mesh_shape dimension",
        )
    for pattern, layout in options["layout_map"].items():
        unknown = [a for a in layout if a is not None and a not in axes]
        if unknown:
            raise PluginOptionError(
                f"keras layout_map {pattern!r} names axis {unknown[0]!r}, which axis_names"
                f" {list(axes)} does not have",
                field=f"options.layout_map[{pattern!r}]",
                value=list(layout),
                expected=f'axis names from {list(axes)}, or "" for a replicated dimension',
            )
    batch = options.get("batch_dim_name")
    if batch is not None and batch not in axes:
        raise PluginOptionError(
            f"keras batch_dim_name {batch!r} is not one of axis_names {list(axes)}",
            field="options.batch_dim_name",
            value=batch,
            expected=f"one of {list(axes)}",
        )


# ------------------------------------------------------------------------- the table

KERAS_BACKENDS = ("jax", "torch", "tensorflow")
# No "mpi": the torch wheels nodes install (PyPI's) are built without MPI, so
# init_process_group("mpi") fails on every node; refused here, before anything starts.
TORCH_BACKENDS = ("nccl", "gloo")


def _torch_backend(plugin: str, key: str, value: Any) -> Any:
    if value == "mpi":
        expected = (
            f"one of {', '.join(TORCH_BACKENDS)} (nccl: NVIDIA GPUs; gloo: CPU); the torch "
            "wheels the nodes install are built without MPI"
        )
        _fail(plugin, key, value, expected, f"torch backend 'mpi' is not available: {expected}")
    return _choice(TORCH_BACKENDS, allow_none=True)(plugin, key, value)


_INIT_TIMEOUT = Option(
    "init_timeout", SECONDS, "$SKYINFRA_INIT_TIMEOUT, else 600 seconds", _seconds
)

PLUGINS: dict[str, PluginEntry] = {
    "jax": PluginEntry(
        "jax",
        "jax.distributed.initialize across every process; shutdown at the end",
        (
            _INIT_TIMEOUT,
            Option(
                "initialize",
                "true or false",
                "true (false: the script calls jax.distributed.initialize itself)",
                _bool,
            ),
            Option(
                "compilation_cache",
                "true or false",
                "true: compiled programs are kept in $SKYINFRA_NODE_DIR/cache/jax for the node's"
                " next worker",
                _bool,
            ),
        ),
    ),
    "keras": PluginEntry(
        "keras",
        "KERAS_BACKEND before keras is imported; DataParallel or ModelParallel on JAX",
        (
            Option(
                "backend", f"one of {', '.join(KERAS_BACKENDS)}", "jax", _choice(KERAS_BACKENDS)
            ),
            Option(
                "mesh_shape", "a list of positive integers", "none (data parallel)", _mesh_shape
            ),
            Option(
                "axis_names", "a list of axis names, one per mesh dimension", "none", _axis_names
            ),
            Option("layout_map", "a table of regex -> axis names", "none", _layout_map),
            Option("batch_dim_name", "one of axis_names", "the first of axis_names", _name),
        ),
        _keras_together,
    ),
    "torch": PluginEntry(
        "torch",
        "torchrun's environment and init_process_group; destroy_process_group at the end",
        (
            Option(
                "backend",
                f"one of {', '.join(TORCH_BACKENDS)}",
                "nccl with CUDA, else gloo",
                _torch_backend,
            ),
            _INIT_TIMEOUT,
        ),
    ),
}


def validate_plugin(name: object, options: object = None) -> dict[str, Any]:
    """The plugin's options, checked against the table and normalised (a copy).

    Raises :class:`PluginOptionError` naming the field (``name``, ``options.KEY``) and what is
    valid. Options left out keep their default (they are not filled in).
    """
    if not isinstance(name, str) or name not in PLUGINS:
        raise PluginOptionError(
            f"unknown plugin {name!r}; available: {', '.join(PLUGINS)}",
            field="name",
            value=name,
            expected=f"one of {list(PLUGINS)}",
        )
    plugin = PLUGINS[name]
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise PluginOptionError(
            f"plugin {name!r} options must be a table of option = value, got {options!r}",
            field="options",
            value=options,
            expected="a table of option = value",
        )
    known = {o.name: o for o in plugin.options}
    clean: dict[str, Any] = {}
    for key, value in options.items():
        if key not in known:
            raise PluginOptionError(
                f"plugin {name!r} has no option {key!r};"
                f" valid options: {', '.join(plugin.option_names)}",
                field=f"options.{key}",
                value=value,
                expected=f"an option of {name}: {list(plugin.option_names)}",
            )
        clean[key] = known[key].check(name, key, value)
    if plugin.check_together is not None:
        plugin.check_together(clean)
    return clean


def validate_plugins(plugins: Iterable[PluginRef]) -> tuple[PluginRef, ...]:
    """Every plugin checked (errors carry its ``index``); each plugin at most once. Raises
    the first problem (:func:`plugin_problems` finds them all)."""
    result, problems = plugin_problems(plugins)
    if problems:
        raise problems[0]
    return result


def plugin_problems(
    plugins: Iterable[PluginRef],
) -> tuple[tuple[PluginRef, ...], list[PluginOptionError]]:
    """The plugins that are valid (normalised) and a problem for each that is not, each
    carrying its ``index``: one bad plugin does not hide another's problem."""
    seen: set[str] = set()
    result: list[PluginRef] = []
    problems: list[PluginOptionError] = []
    for index, ref in enumerate(plugins):
        try:
            options = validate_plugin(ref.name, ref.options)
        except PluginOptionError as err:
            err.index = index
            problems.append(err)
            continue
        if ref.name in seen:
            problems.append(
                PluginOptionError(
                    f"plugin {ref.name!r} is listed twice; each plugin is set up at most once",
                    field="",
                    value=ref.name,
                    expected="each plugin at most once",
                    index=index,
                )
            )
            continue
        seen.add(ref.name)
        result.append(PluginRef(ref.name, options))
    return tuple(result), problems


def _split_options(text: str) -> list[str]:
    """Split at commas outside brackets, braces and double-quoted strings."""
    items: list[str] = []
    depth, quoted, escaped, start = 0, False, False, 0
    for i, char in enumerate(text):
        if quoted:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item for item in items if item.strip()]


def parse_plugin_flag(text: str) -> PluginRef:
    """``NAME`` or ``NAME:key=value,...`` -> a PluginRef (its options are not checked here).

    A value that is JSON is read as JSON (``30`` a number, ``[1,2]`` a list,
    ``{"a":[null,"m"]}`` a table); anything else is a string (``backend=jax``). Commas inside
    brackets, braces or quotes do not split options.
    """
    name, _, rest = text.partition(":")
    name = name.strip()
    if not name.isidentifier():
        raise PluginFlagError(
            f"--plugin {text!r}: expected NAME or NAME:key=value,...",
            text=text,
            expected=FLAG_SYNTAX,
        )
    options: dict[str, Any] = {}
    for item in _split_options(rest):
        key, eq, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        if not eq or not key.isidentifier():
            raise PluginFlagError(
                f"--plugin {text!r}: option {item.strip()!r} is not key=value",
                text=text,
                expected=FLAG_SYNTAX,
            )
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw
    return PluginRef(name, options)
