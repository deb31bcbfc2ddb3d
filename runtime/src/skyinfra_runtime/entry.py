"""Entrypoints: ``package.module:function``, ``path/to/script.py`` or ``script.py:function``."""

from __future__ import annotations

import importlib
import importlib.util
import runpy
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyinfra_runtime.errors import EntrypointError

FORMS = "'package.module:function', 'path/to/script.py' or 'path/to/script.py:function'"


@dataclass(frozen=True)
class Entrypoint:
    text: str
    module: str | None  # dotted module name, or None for a script path
    path: Path | None  # script path, or None for a module
    function: str | None  # None: run the script as __main__

    @classmethod
    def parse(cls, text: str) -> Entrypoint:
        target, sep, function = text.partition(":")
        if not target or (sep and not function.isidentifier()):
            raise EntrypointError(f"entrypoint {text!r} is malformed; expected {FORMS}")
        if target.endswith(".py"):
            return cls(text, None, Path(target), function or None)
        if not sep:
            raise EntrypointError(
                f"entrypoint {text!r} names a module without a function; expected {FORMS}"
            )
        if not all(part.isidentifier() for part in target.split(".")):
            raise EntrypointError(f"entrypoint {text!r}: {target!r} is not a module name")
        return cls(text, target, None, function)

    def check(self) -> None:
        """Fail early (before any plugin waits for peers) if the target does not exist.

        Only looks the target up: importing the user's module here could import keras before
        the keras plugin has chosen its backend.
        """
        if self.path is not None:
            if not self.path.is_file():
                raise EntrypointError(
                    f"entrypoint script {str(self.path)!r} does not exist (cwd {Path.cwd()})"
                )
            return
        assert self.module is not None
        try:
            spec = importlib.util.find_spec(self.module)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            raise EntrypointError(
                f"entrypoint module {self.module!r} cannot be found on sys.path (cwd {Path.cwd()})"
            )

    def run(self, args: Sequence[str]) -> Any:
        """Run it (user code: its exceptions propagate). Returns the function's value."""
        if self.path is not None and self.function is None:
            sys.argv = [str(self.path), *args]
            runpy.run_path(str(self.path), run_name="__main__")
            return None
        sys.argv = [self.text, *args]
        fn = self._load_function()
        return fn()

    def _load_function(self) -> Callable[[], Any]:
        if self.path is not None:
            namespace = runpy.run_path(str(self.path), run_name="__skyinfra_entry__")
            fn = namespace.get(self.function or "")
        else:
            assert self.module is not None
            fn = getattr(importlib.import_module(self.module), self.function or "", None)
        if not callable(fn):
            raise EntrypointError(f"entrypoint {self.text!r}: {self.function!r} is not a function")
        function: Callable[[], Any] = fn
        return function
