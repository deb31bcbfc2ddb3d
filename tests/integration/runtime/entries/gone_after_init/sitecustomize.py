"""For one node of the failed-barrier test: torch's init_process_group returns, and 1 s later
(the peer has finished its own init and waits in the plugin's barrier) the process is gone,
as a rank killed there would be."""

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hooks"))
from torch_init_hook import wrap_init_process_group


def gone_after(real: Callable[..., Any]) -> Callable[..., Any]:
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        time.sleep(1)
        os._exit(9)

    return init_process_group


wrap_init_process_group(gone_after)
