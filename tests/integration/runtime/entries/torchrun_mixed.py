"""The two mixed cases: a function entry that initialises again, a script that does not."""

import torch.distributed as dist


def init_again() -> None:
    dist.init_process_group("gloo")


if __name__ == "__main__":
    dist.get_rank()  # expects a group the plugin does not make for a script
    dist.all_reduce(__import__("torch").ones(1))
