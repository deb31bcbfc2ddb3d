"""One worker process: plugins' set-up in order, the entrypoint, teardown in reverse.

Started by the launcher (``python -m skyinfra_runtime.worker``) with the topology, node and
worker index in the environment. It writes its phase to a status file so the launcher can
tell a set-up failure (exit 3) from a user failure (exit 1) even if the process is killed by
a signal (XLA and NCCL abort the process on some errors instead of raising); the file's time
also tells it when the worker last did framework start-up work (startwork.py).
"""

from __future__ import annotations

import atexit
import gc
import io
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skyinfra_runtime import exitcodes, startwork
from skyinfra_runtime.entry import Entrypoint
from skyinfra_runtime.errors import EntrypointError, RuntimeSetupError
from skyinfra_runtime.info import instance_info
from skyinfra_runtime.jobenv import mask_value
from skyinfra_runtime.parentdeath import end_with_parent
from skyinfra_runtime.plugins import Plugin, from_name
from skyinfra_runtime.topology import load_topology


class _Terminated(BaseException):
    """SIGTERM turned into an exception so that teardown still runs."""


class _Ending:
    """Set once the worker is ending (its entry returned, raised or was interrupted)."""

    now = False


def _on_sigterm(signum: int, frame: object) -> None:
    # Raised until the worker is ending, then ignored. The agent's SIGTERM reaches the
    # launcher's whole group, and the launcher forwards it to its workers again: that second
    # one, raised in the teardown, cut the plugins' teardown short (a checkpoint still being
    # written among it) with a traceback. Not merely once: an exception raised in a finalizer
    # (a __del__ running when the signal is handled) is ignored by Python, and a worker that
    # had disarmed itself then ran on, deaf to the launcher's SIGTERM. The agent's SIGKILL
    # after its grace still bounds a teardown that hangs.
    if not _Ending.now:
        raise _Terminated()


def json_value(value: Any) -> Any:
    """``value`` if JSON can hold it, else ``{"repr": ...}`` (with a note on stderr)."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        print(
            f"skyinfra-runtime: return value of type {type(value).__name__} is not JSON;"
            " recording its repr",
            file=sys.stderr,
        )
        return {"repr": repr(value)}


def run_worker(
    entry_text: str,
    args: list[str],
    result_path: Path,
    status_path: Path,
    ready: list[Plugin] | None = None,
) -> int:
    """Set up, run, tear down; returns the exit code. ``ready`` receives each plugin whose
    set-up began: a set-up that fails midway may hold what it made (torch's process group,
    when only the barrier after its init failed), and its teardown undoes that too."""
    _Ending.now = False
    try:
        # In the try: a SIGTERM as soon as the handler is in place, before the set-up began
        # (the launcher forwards one to a standby it has just handed the job), is an
        # interruption like any other, not a traceback.
        signal.signal(signal.SIGTERM, _on_sigterm)
        return _set_up_run_tear_down(entry_text, args, result_path, status_path, ready)
    except (KeyboardInterrupt, _Terminated):
        _Ending.now = True
        return exitcodes.INTERRUPTED


def _set_up_run_tear_down(
    entry_text: str,
    args: list[str],
    result_path: Path,
    status_path: Path,
    ready: list[Plugin] | None,
) -> int:
    def phase(name: str) -> None:
        status_path.write_text(name)

    startwork.mark_in(status_path)
    phase(startwork.SETUP)
    try:
        topology = load_topology()
        info = instance_info()
        entry = Entrypoint.parse(entry_text)
        plugins: list[Plugin] = [from_name(p.name, p.options) for p in topology.plugins]
    except RuntimeSetupError as exc:
        _log(str(exc))
        return exitcodes.SETUP_FAILED
    except EntrypointError as exc:
        _log(str(exc))
        return exitcodes.USAGE

    if ready is None:
        ready = []
    code = exitcodes.OK
    value: Any = None
    try:
        try:
            for plugin in plugins:
                phase(startwork.plugin_setup(plugin.name))
                started = time.monotonic()
                ready.append(plugin)  # torn down whatever its set-up got to
                plugin.setup(info, topology, script=entry.runs_as_main)
                _log(f"plugin {plugin.name} ready in {time.monotonic() - started:.1f}s")
        except RuntimeSetupError as exc:
            _log(f"set-up failed: {exc}")
            code = exitcodes.SETUP_FAILED
            return code
        phase(startwork.RUNNING)
        try:
            value = entry.run(args)
        except EntrypointError as exc:
            _log(str(exc))
            code = exitcodes.USAGE
        except SystemExit as exc:
            code = _system_exit_code(exc)
        except (KeyboardInterrupt, _Terminated):
            raise
        except BaseException as exc:
            traceback.print_exc()
            _explain(ready, exc)
            code = exitcodes.USER_FAILED
    except (KeyboardInterrupt, _Terminated):
        _Ending.now = True  # first: a SIGTERM from here on lets the teardown run
        code = exitcodes.INTERRUPTED
    finally:
        _Ending.now = True
        sys.stdout.flush()
        for plugin in reversed(ready):
            try:
                plugin.teardown(failed=code != exitcodes.OK)
                _log(f"plugin {plugin.name} torn down")
            except Exception as exc:  # a failing teardown must not hide the real result
                _log(f"teardown of plugin {plugin.name!r} failed: {exc}")
        phase(startwork.DONE)
    if code == exitcodes.OK:
        result = {"worker": info.worker, "global_index": info.global_index}
        # A script (or -m module) returns nothing: no "value", where a function's None is null.
        if not entry.runs_as_main:
            # Masked before it is written anywhere: a returned secret is *** in result.json
            # and in every copy the operator keeps (summary.json, node-N.result.json).
            result["value"] = mask_value(json_value(value), os.environ)
        result_path.write_text(json.dumps(result))
    return code


def _explain(plugins: list[Plugin], exc: BaseException) -> None:
    """After the user's traceback: what a plugin knows about it (e.g. initialising twice)."""
    for plugin in plugins:
        try:
            hint = plugin.explain(exc)
        except Exception:  # a hint must never hide the user's error
            hint = None
        if hint:
            _log(f"plugin {plugin.name}: {hint}")


def _log(message: str) -> None:
    """One line on stderr, flushed: the operator interleaves several workers' streams. One
    write (print() writes the newline separately on an unbuffered stream, and the workers of a
    node share its stderr: two lines would run into one)."""
    sys.stderr.write(f"skyinfra-runtime: {message}\n")
    sys.stderr.flush()


def _system_exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return exitcodes.OK
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return exitcodes.USER_FAILED


def _die_with_launcher() -> None:
    """Linux: be killed (SIGKILL) when the launcher dies, so that a launcher killed by a signal
    leaves no worker behind holding the node's output open (and its peers waiting); elsewhere
    the operator still ends the node's process group."""
    if not end_with_parent(signal.SIGKILL, os.environ.get(startwork.LAUNCHER_PID_ENV)):
        os._exit(exitcodes.INTERRUPTED)  # the launcher died before the call took effect


class _EndBeforeTeardown:
    """The exit code to leave with from the last atexit hook, skipping the interpreter's
    teardown (its module clean-up and C++ static destructors); None: a normal exit."""

    code: int | None = None

    @classmethod
    def hook(cls) -> None:
        # Registered before any framework loads, so it runs after every other atexit hook
        # (they run last registered first), and after the interpreter joined the program's
        # non-daemon threads.
        if cls.code is None:
            return
        _flush_open_files()
        os._exit(cls.code)


# What open() returns, except unbuffered files (nothing to flush).
_BUFFERED_FILES = (io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom)


def _flush_open_files() -> None:
    """What the interpreter's teardown would have written: files the program left open."""
    # By type, not isinstance(): that reads __class__, and some modules' deprecated objects
    # warn when it is read.
    for obj in gc.get_objects():
        try:
            if issubclass(type(obj), _BUFFERED_FILES) and not obj.closed and obj.writable():
                obj.flush()
        except Exception:  # one odd object must not stop the others' flush
            continue


def main(*, warm: bool = False, on_exit: Callable[[int], None] | None = None) -> None:
    """argv: ENTRY RESULT_PATH STATUS_PATH -- ARGS... ``warm``: a standby took the job
    (standby.py), which already ends with the launcher and registered the exit hook;
    ``on_exit`` hears the exit code before the process leaves (a standby tells its launcher,
    which is not its parent)."""
    if not warm:
        _die_with_launcher()
        atexit.register(_EndBeforeTeardown.hook)
    entry_text, result_path, status_path = sys.argv[1:4]
    args = sys.argv[5:] if sys.argv[4:5] == ["--"] else sys.argv[4:]
    plugins: list[Plugin] = []
    code = run_worker(entry_text, args, Path(result_path), Path(status_path), plugins)
    sys.stdout.flush()
    sys.stderr.flush()
    if on_exit is not None:
        on_exit(code)
    if any(getattr(plugin, "skip_exit_hooks", False) for plugin in plugins):
        # A framework's atexit hook would wait in a barrier for peers that may never come
        # (jax's clean_up() calls distributed.shutdown()); the exit code matters more.
        os._exit(code)
    if any(getattr(plugin, "end_before_teardown", False) for plugin in plugins):
        # torch: a process group can outlive destroy_process_group() (DDP keeps it), and when
        # the interpreter's teardown destroys it one of gloo's threads may abort the process
        # ("terminate called without an active exception"), failing a job that finished.
        _EndBeforeTeardown.code = code
    raise SystemExit(code)


if __name__ == "__main__":
    main()
