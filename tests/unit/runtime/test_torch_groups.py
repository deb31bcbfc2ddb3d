"""The torch plugin keeps every process group of the job until its teardown (issue 48): a
gloo group destroyed from DDP's Reducer with the GIL held could hang the worker at its end."""

from __future__ import annotations

import pytest
from skyinfra_runtime.plugins.torch import TorchPlugin, keep_process_groups


def test_a_group_the_job_destroyed_while_ddp_held_it_lives_until_the_plugins_teardown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch = pytest.importorskip("torch")
    dist = torch.distributed
    from torch.nn.parallel import DistributedDataParallel

    monkeypatch.setattr(dist.distributed_c10d, "_pg_map", {})  # torch's own map comes back
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    plugin = TorchPlugin()
    keep_process_groups(dist, plugin._groups)
    # As a torchrun script does: its own group, DDP, a step, destroy_process_group().
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    group = dist.group.WORLD
    model = DistributedDataParallel(torch.nn.Linear(2, 1))
    model(torch.ones(1, 2)).sum().backward()
    dist.destroy_process_group()
    assert not dist.is_initialized()
    del model  # the Reducer is not the group's last holder: nothing destroyed here
    assert len(plugin._groups) == 1 and plugin._groups[0] is group
    del group
    plugin.teardown()  # the last holder, through torch's handle (the GIL released)
    assert plugin._groups == []
