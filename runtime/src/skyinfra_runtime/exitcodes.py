"""Exit codes of ``skyinfra-runtime launch`` (the operator reads them per node)."""

OK = 0
USER_FAILED = 1  # the user's code raised; its traceback was printed
USAGE = 2  # bad command line or entrypoint
SETUP_FAILED = 3  # topology or plugin set-up failed
INTERRUPTED = 130  # SIGINT/SIGTERM
