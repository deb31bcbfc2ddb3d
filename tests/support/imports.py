"""What a piece of code imports: run in a fresh interpreter, which then lists which of the
watched modules it loaded (start-up cost tests: a module not loaded costs nothing)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence


def loaded_by(code: str, watched: Sequence[str]) -> list[str]:
    """The modules of ``watched`` in ``sys.modules`` once ``code`` has run in a fresh
    interpreter (this one's), in ``watched``'s order."""
    probe = (
        f"import json as _json, sys as _sys\n{code}\n"
        f"print(_json.dumps([m for m in {tuple(watched)!r} if m in _sys.modules]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    loaded: list[str] = json.loads(proc.stdout.splitlines()[-1])
    return loaded
