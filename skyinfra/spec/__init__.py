"""The cluster spec: what the user asks for, validated completely before anything is written.

Sources, later ones win: defaults < TOML file (``skyinfra.toml`` or ``--spec``) < CLI flags.
``load_spec`` returns a frozen :class:`ClusterSpec` or raises :class:`SpecError` naming the
field, the value and what would be valid. It is pure apart from reading the spec file.

This package knows the fields every cluster has. Each target owns its own table of the file
(``[local]``, ``[aws]``): the target named by ``provider`` parses it (skyinfra/targets/), and
so does every other target whose table is present (a mistake there is still a mistake).
``ClusterSpec.to_dict`` gives the file's shape back and ``ClusterSpec.from_dict`` reads it, so
``spec.json`` in a workspace round-trips.

The package's modules: cluster.py (ClusterSpec and validate_spec), fields.py (the field
readers every table's parser uses), loading.py (the file, the flags, and the values an existing
cluster keeps). Callers import from ``skyinfra.spec``.
"""

from __future__ import annotations

from skyinfra.spec.cluster import (
    COMMON_KEYS,
    DEFAULT_PROVIDER,
    JOB_ONLY_KEYS,
    MAX_RESTARTS,
    MAX_RUN_TIMEOUT_S,
    NAME_EXPECTED,
    NAME_RE,
    RETRY_ON,
    ClusterSpec,
    PluginSpec,
    check_name,
    checkpoints_name,
    parse_plugin_flag,
    validate_spec,
)
from skyinfra.spec.fields import Problems, read_bool, read_int, read_str, reject_unknown
from skyinfra.spec.loading import (
    FLAG_KEYS,
    FLAG_OF_FIELD,
    KeptValue,
    as_flag_problem,
    load_spec,
    load_spec_keeping_applied,
    merge_overrides,
    read_spec_file,
    validate_with_flags,
)

__all__ = [
    "COMMON_KEYS",
    "DEFAULT_PROVIDER",
    "FLAG_KEYS",
    "FLAG_OF_FIELD",
    "JOB_ONLY_KEYS",
    "MAX_RESTARTS",
    "MAX_RUN_TIMEOUT_S",
    "NAME_EXPECTED",
    "NAME_RE",
    "RETRY_ON",
    "ClusterSpec",
    "KeptValue",
    "PluginSpec",
    "Problems",
    "as_flag_problem",
    "check_name",
    "checkpoints_name",
    "load_spec",
    "load_spec_keeping_applied",
    "merge_overrides",
    "parse_plugin_flag",
    "read_bool",
    "read_int",
    "read_spec_file",
    "read_str",
    "reject_unknown",
    "validate_spec",
    "validate_with_flags",
]
