"""Entrypoints: ``package.module:function``, ``path/to/script.py``, ``script.py:function`` or
``-m package.module`` (run as ``python -m``).

A script or ``-m`` module runs as ``__main__`` with ``sys.argv = [script, *args]`` and
``sys.path[0]`` set as Python sets it (the script's directory; the working directory for
``-m``): the same as ``python script.py`` or ``torchrun script.py``. Such an entry owns its
framework's initialisation (a torchrun script calls ``init_process_group`` itself); a function
entry gets it done by the plugins.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import runpy
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyinfra_runtime.errors import EntrypointError

FORMS = (
    "'package.module:function', 'path/to/script.py', 'path/to/script.py:function'"
    " or '-m package.module'"
)
# The text of a ``python -m`` entry: "-m package.module".
MODULE_FLAG = "-m"
# A pickled call's file (skyinfra_runtime.call), named by the operator's Python API only.
CALL_SUFFIX = ".pkl"


@dataclass(frozen=True)
class Entrypoint:
    text: str
    module: str | None  # dotted module name, or None for a script path
    path: Path | None  # script path, or None for a module
    function: str | None  # None: run the script (or the -m module) as __main__
    # A pickled call (``path/to/call.pkl``, skyinfra_runtime.call): what the operator's Python
    # API sends; runs like a function entry (the plugins initialise the frameworks around it).
    call: bool = False

    @classmethod
    def parse(cls, text: str) -> Entrypoint:
        flag, space, name = text.partition(" ")
        if flag == MODULE_FLAG and space:
            return cls.main_module(name.strip())
        target, sep, function = text.partition(":")
        if not target or (sep and not function.isidentifier()):
            raise EntrypointError(f"entrypoint {text!r} is malformed; expected {FORMS}")
        if target.endswith(".py"):
            return cls(text, None, Path(target), function or None)
        if target.endswith(CALL_SUFFIX) and not sep:
            return cls(text, None, Path(target), None, call=True)
        if not sep:
            raise EntrypointError(
                f"entrypoint {text!r} names a module without a function; expected {FORMS}"
                f" (to run it as `python -m` does: -m {target})"
            )
        if not all(part.isidentifier() for part in target.split(".")):
            raise EntrypointError(f"entrypoint {text!r}: {target!r} is not a module name")
        return cls(text, target, None, function)

    @classmethod
    def main_module(cls, name: str) -> Entrypoint:
        """``python -m NAME``: a module (or a package with ``__main__``) run as __main__."""
        if not name or not all(part.isidentifier() for part in name.split(".")):
            raise EntrypointError(
                f"entrypoint '-m {name}': {name!r} is not a module name (package.module)"
            )
        return cls(f"{MODULE_FLAG} {name}", name, None, None)

    @property
    def runs_as_main(self) -> bool:
        """A script or ``-m`` module: runs as ``__main__`` and initialises its framework."""
        return self.function is None and not self.call

    def argv(self) -> list[str]:
        """The entry as ``skyinfra-runtime launch`` takes it: ``[text]`` or ``["-m", NAME]``."""
        if self.path is None and self.function is None:
            assert self.module is not None
            return [MODULE_FLAG, self.module]
        return [self.text]

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
        if self.call:
            from skyinfra_runtime.call import run_call

            assert self.path is not None
            sys.argv = [self.text, *args]
            return run_call(self.path)
        if self.path is not None and self.function is None:
            # As `python script.py`: argv[0] as given, sys.path[0] the script's directory.
            sys.argv = [str(self.path), *args]
            _set_path0(str(self.path.resolve().parent))
            runpy.run_path(str(self.path), run_name="__main__")
            return None
        if self.function is None:
            assert self.module is not None
            # As `python -m`: sys.path[0] the working directory, argv[0] the module's file.
            sys.argv = [self.module, *args]
            _set_path0(os.getcwd())
            runpy.run_module(self.module, run_name="__main__", alter_sys=True)
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


def _set_path0(directory: str) -> None:
    """``sys.path[0]`` as Python sets it for the user's program; the worker's own first entry
    (the directory it was started in) gives way, as the interpreter's would."""
    if sys.path:
        sys.path[0] = directory
    else:
        sys.path.insert(0, directory)
