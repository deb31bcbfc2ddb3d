"""For one node of the init-barrier test: torch's init_process_group returns 3 s late there (a
rank slow to finish connecting to its peers) and then writes the time to $INIT_RETURNED_FILE."""

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hooks"))
from torch_init_hook import wrap_init_process_group


def slow(real: Callable[..., Any]) -> Callable[..., Any]:
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        time.sleep(3)
        Path(os.environ["INIT_RETURNED_FILE"]).write_text(repr(time.time()))
        return result

    return init_process_group


wrap_init_process_group(slow)
