"""Entrypoint forms: which run as __main__ (a script, -m) and which are functions."""

from __future__ import annotations

from pathlib import Path

import pytest
from skyinfra_runtime.entry import Entrypoint
from skyinfra_runtime.errors import EntrypointError


@pytest.mark.parametrize(
    ("text", "as_main", "argv"),
    [
        ("train.py", True, ["train.py"]),
        ("-m pkg.train", True, ["-m", "pkg.train"]),
        ("train.py:main", False, ["train.py:main"]),
        ("pkg.train:main", False, ["pkg.train:main"]),
    ],
)
def test_forms(text: str, as_main: bool, argv: list[str]) -> None:
    entry = Entrypoint.parse(text)
    assert entry.runs_as_main is as_main
    assert entry.argv() == argv
    assert Entrypoint.parse(entry.text) == entry  # the text travels to the worker


def test_module_entry_names_the_module() -> None:
    entry = Entrypoint.main_module("pkg.train")
    assert (entry.text, entry.module, entry.path) == ("-m pkg.train", "pkg.train", None)
    assert Entrypoint.parse("script.py").path == Path("script.py")


@pytest.mark.parametrize("name", ["", "pkg-x", "pkg.", "a b"])
def test_bad_module_names_are_refused(name: str) -> None:
    with pytest.raises(EntrypointError, match="is not a module name"):
        Entrypoint.main_module(name)
