"""The jax plugin's compilation cache on the node (pure: the settings from the environment)."""

from __future__ import annotations

import pytest
from skyinfra_runtime.errors import PluginOptionError
from skyinfra_runtime.plugins import from_name
from skyinfra_runtime.plugins.jax import compilation_cache_settings

NODE = {"SKYINFRA_NODE_DIR": "/opt/skyinfra/node/n1"}


def test_every_program_is_kept_in_the_nodes_own_folder() -> None:
    assert compilation_cache_settings(NODE) == {
        "jax_compilation_cache_dir": "/opt/skyinfra/node/n1/cache/jax",
        "jax_persistent_cache_min_compile_time_secs": 0.0,
    }


def test_a_threshold_the_user_set_is_kept() -> None:
    environ = {**NODE, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "2"}
    assert compilation_cache_settings(environ) == {
        "jax_compilation_cache_dir": "/opt/skyinfra/node/n1/cache/jax"
    }


@pytest.mark.parametrize(
    "environ",
    [{}, {**NODE, "JAX_COMPILATION_CACHE_DIR": "/data/jax-cache"}],
    ids=["no node directory", "the user's own cache"],
)
def test_nothing_is_set_without_a_node_directory_or_over_the_users_cache(
    environ: dict[str, str],
) -> None:
    assert compilation_cache_settings(environ) == {}


def test_the_option_is_a_boolean() -> None:
    assert from_name("jax", {"compilation_cache": False}).compilation_cache is False  # type: ignore[attr-defined]
    with pytest.raises(PluginOptionError, match="compilation_cache"):
        from_name("jax", {"compilation_cache": "off"})
