"""Pipeline parallel (``pp``) and data parallel across pipelines (``dp×pp``): the layers are split
into p contiguous stages (P, G, O are S by stage), and the batch into m micro-batches that flow
through them.

Each micro-batch sends its boundary activation forward to the next stage and, in backward, its
boundary gradient back: one send and one recv per boundary (SPEC §4). The order in which a stage
runs forward ("F", k) and backward ("B", k) passes is the core's ``pipeline_order``: GPipe runs all
m forwards and then all m backwards (m micro-batches' activations in flight); 1F1B starts
backwards as early as it can (at most p - stage in flight). Gradients accumulate locally over the
micro-batches (each micro-batch loss is divided by m: the time axis is scaled once); with a data
axis, the accumulated gradient is all-reduced once per step, after the last micro-batch.

Sends are non-blocking: under 1F1B neighbouring stages send to each other at the same moment,
and two blocking sends would wait for each other forever.
"""

from __future__ import annotations

import torch

from placement_edu.models import stage_layers
from placement_edu.faults import FaultName
from placement_edu.runtime.engines import flat
from placement_edu.runtime.engines.dp import DataParallel
from placement_edu.runtime.engines.toy import TinyMLP, loss_fn, mlp_forward
from placement_edu.schedule import pipeline_order


class Pipeline(DataParallel):
    def model_shapes(self) -> flat.Shapes:
        # The core's one stage split: contiguous layers, earlier stages take the extra ones.
        assert isinstance(self.ctx.module, TinyMLP)
        self.layers = stage_layers(
            len(self.ctx.module.layers), self.ctx.mesh.degree("pipeline"), self.coords["pipeline"]
        )
        return [
            (name, shape)
            for name, shape in super().model_shapes()
            if int(name.split(".")[1]) in self.layers
        ]

    def step(self, step: int) -> None:
        p, stage, m = (
            self.ctx.mesh.degree("pipeline"),
            self.coords["pipeline"],
            self.ctx.micro_batches,
        )
        pipe = self.comm.groups["pipeline"][1] if p > 1 else [self.ctx.rank]
        first, last = stage == 0, stage == p - 1
        x, y = self.local_batch(step)
        xs, ys = x.chunk(m), y.chunk(m)
        assert self.params.grad is not None  # G: preset in __init__; backward accumulates into it
        self.params.grad.zero_()
        inputs: dict[int, torch.Tensor] = {}
        outputs: dict[int, torch.Tensor] = {}
        for kind, k in pipeline_order(self.ctx.pipeline_schedule, p, stage, m):
            if kind == "F":
                self.comm.at(step, "forward")
                if first:
                    inputs[k] = xs[k]
                else:
                    inputs[k] = torch.empty_like(xs[k])
                    # The previous stage computed this micro-batch's input: receive it.
                    self.comm.recv(inputs[k], pipe[stage - 1], "activations", "pipeline")
                    inputs[k].requires_grad_()
                with self.mem.forward(k):
                    out = mlp_forward(flat.views(self.params, self.shapes), inputs[k], self.layers)
                    outputs[k] = loss_fn(out, ys[k]) / m if last else out
                if not last:
                    # The next stage needs this boundary activation as its input.
                    self.comm.send(out.detach(), pipe[stage + 1], "activations", "pipeline")
            else:
                self.comm.at(step, "backward")
                if last:
                    outputs.pop(k).backward()
                else:
                    grad = torch.empty_like(outputs[k])
                    # The next stage computed d loss / d (our output): receive it.
                    self.comm.recv(grad, pipe[stage + 1], "activations", "pipeline")
                    outputs.pop(k).backward(grad)
                self.mem.backward_done(k)
                if not first:
                    # The previous stage needs d loss / d (its output) to continue backward.
                    sent = inputs[k].grad
                    assert sent is not None  # our input required grad: backward filled it
                    self.comm.send(sent, pipe[stage - 1], "activations", "pipeline")
                inputs.pop(k)
                if k == m - 1 and self.d > 1:
                    if not self.fault(FaultName.SKIP_GRAD_REDUCE):
                        # Replicas of this stage in other pipelines saw other samples: all-reduce
                        # the gradient accumulated over all micro-batches, once per step (rule 1).
                        self.comm.all_reduce(self.params.grad, "grads", "data")
                    self.scale(self.params.grad)
        self.boundary()
        self.comm.at(step, "step")
        with torch.no_grad():
            self.params -= self.ctx.adam.delta(self.params.grad, self.m, self.v, step + 1)
        self.boundary()
