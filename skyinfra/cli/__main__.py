"""`python -m skyinfra.cli`: the console script without its wrapper."""

from skyinfra.cli.main import main

main()
