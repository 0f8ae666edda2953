"""A tiny horovod.torch job: every rank contributes rank+1, prints what the allreduce returned."""
import json

import horovod.torch as hvd
import torch

hvd.init()
summed = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)] * 3), op=hvd.Sum, name="sum")
averaged = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Average, name="avg")
gathered = hvd.allgather(torch.tensor([[hvd.rank()]]), name="gather")
print(json.dumps({
    "rank": hvd.rank(),
    "size": hvd.size(),
    "sum": summed.tolist(),
    "avg": averaged.tolist(),
    "gathered": gathered.flatten().tolist(),
}), flush=True)
