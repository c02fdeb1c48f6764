"""`checkpoint/torch.save` and `checkpoint/torch.load` events (`path` when a
path is given, `bytes` written or read when known).  Inside a dataset
access (a DataLoader worker reading samples with torch.load) they are data
loading, part of the `item` event, and not events of their own."""

from __future__ import annotations

import torch
import torch.serialization as serialization

from dftracer._autotrace import comm
from dftracer._autotrace._base import part, patch

P = part("checkpoint")


def install() -> None:
    """torch.save (the file is argument 1) and torch.load (argument 0), timed
    in C (src/torch/autotrace_calls.c): `path` is the absolute path of a
    path argument, `bytes` the file's size after the call, or what a file
    object's position moved."""
    comm.setup_calls()
    save = comm.timed(serialization.save, "torch.save", "save",
                      data=comm.arg_spec(serialization.save, "f"))
    load = comm.timed(serialization.load, "torch.load", "load",
                      data=comm.arg_spec(serialization.load, "f"))
    for owner in (serialization, torch):
        patch(P, owner, "save", save)
        patch(P, owner, "load", load)
    P.started()
