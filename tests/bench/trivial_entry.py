"""The fan-out benchmark's user code: nothing, so `run` measures only its own cost."""


def main() -> int:
    return 0
