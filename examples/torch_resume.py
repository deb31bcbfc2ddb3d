"""PyTorch DDP that resumes where it stopped, with torch's own checkpointers on the job's
checkpoint directory: ``torch.distributed.checkpoint`` (every rank writes its part) or plain
``torch.save`` from rank 0.

    skyinfra up --name ddp --nodes 2 --plugin torch
    skyinfra run --checkpoints ddp examples/torch_resume.py:main                  # DCP
    skyinfra run --checkpoints ddp1 examples/torch_resume.py:main -- --saver torch-save
    # kill it and run the same line again: it goes on from the last epoch it finished.

Each epoch ends with a checkpoint in ``$SKYINFRA_CHECKPOINT_DIR/step-<epoch>/`` (the same
folder for every job run with the same ``--checkpoints``; on the local target every node sees
it; on AWS each node's is its own disk, restored from S3 with every node's files). A
half-written one is never loaded: DCP writes ``.metadata`` last, once every rank's file is in
(its own commit marker), and a step counts only when every file ``.metadata`` names is there
(on AWS a node lost before its upload leaves a step without its file); the ``torch.save``
path writes to a temporary name, renames it and then marks the step ``COMMITTED``
(skyinfra_runtime.checkpoints). Rank 0 picks the step
and every rank loads that one (a broadcast), so no two ranks resume from different epochs.

A resumed run computes what an uninterrupted one does when the rest is a function of the
epoch: the data order is a permutation seeded by the epoch, and the optimizer's state comes
back with the weights.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

SEED = 3
DCP_MARKER = ".metadata"  # torch.distributed.checkpoint writes it last


def _complete(step: Path, saver: str) -> bool:
    from skyinfra_runtime.checkpoints import COMMIT_MARKER

    if saver != "dcp":
        return (step / COMMIT_MARKER).is_file()
    if not (step / DCP_MARKER).is_file():
        return False
    # Every file `.metadata` names must be there, whole. DCP spreads even replicated tensors
    # over the ranks' files (rank 1's held most of this model's), and on AWS each rank's file
    # reaches the checkpoint set from its own node's upload: a node lost before its upload
    # leaves a step with rank 0's `.metadata` but without that node's file.
    from torch.distributed.checkpoint import FileSystemReader

    try:
        stored = FileSystemReader(str(step)).read_metadata().storage_data
    except Exception:  # a `.metadata` DCP cannot read is no commit mark
        return False
    for info in stored.values():
        part = step / info.relative_path
        if not part.is_file() or part.stat().st_size < info.offset + info.length:
            return False
    return True


def latest_epoch(root: Path, saver: str) -> int:
    """The newest epoch whose checkpoint is complete under ``root`` (0: none)."""
    done = [int(p.name.split("-")[1]) for p in root.glob("step-*") if _complete(p, saver)]
    return max(done, default=0)


def main() -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from skyinfra_runtime import checkpoints, shard
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.nn.parallel import DistributedDataParallel

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--saver", choices=["dcp", "torch-save"], default="dcp")
    ns = parser.parse_args(sys.argv[1:])
    root = Path(os.environ.get("SKYINFRA_CHECKPOINT_DIR") or tempfile.mkdtemp())
    rank = dist.get_rank()

    torch.manual_seed(SEED)  # the same data and initial weights on every rank, every run
    x = torch.randn(512, 8)
    y = x @ torch.randn(8, 1) + 0.1
    x, y = shard(x, y, drop_last=True)
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

    # Every rank resumes from rank 0's choice.
    choice = [latest_epoch(root, ns.saver) if rank == 0 else 0]
    dist.broadcast_object_list(choice, src=0)
    start = int(choice[0])
    if start:
        step = root / f"step-{start:08d}"
        if ns.saver == "dcp":
            model_sd, optim_sd = get_state_dict(model, optimizer)
            state = {"model": model_sd, "optim": optim_sd}
            dcp.load(state, checkpoint_id=str(step))
            set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd)
        else:
            state = torch.load(step / "state.pt", weights_only=True)
            model.module.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optim"])
        print(f"resumed from {step} (epoch {start})", flush=True)

    for epoch in range(start + 1, ns.epochs + 1):
        print(f"epoch {epoch} begins", flush=True)
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(SEED * 1000 + epoch))
        for batch in range(len(x) // ns.batch_size):
            take = order[batch * ns.batch_size : (batch + 1) * ns.batch_size]
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x[take]), y[take])
            loss.backward()
            optimizer.step()
            print(f"epoch {epoch} batch {batch + 1} loss {loss.item():.6f}", flush=True)
        step = root / f"step-{epoch:08d}"
        if ns.saver == "dcp":
            model_sd, optim_sd = get_state_dict(model, optimizer)
            dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(step))
        elif rank == 0:
            step.mkdir(parents=True, exist_ok=True)
            tmp = step / "state.pt.tmp"
            torch.save({"model": model.module.state_dict(), "optim": optimizer.state_dict()}, tmp)
            tmp.replace(step / "state.pt")
            checkpoints.commit(step, {"epoch": epoch})
        print(f"epoch {epoch} ends", flush=True)

    digest = hashlib.sha256()
    for p in model.module.parameters():
        digest.update(p.detach().cpu().numpy().tobytes())
    sha = digest.hexdigest()
    print(f"weights sha256 {sha}", flush=True)
    return {"rank": rank, "resumed_epoch": start or None, "weights_sha256": sha}
