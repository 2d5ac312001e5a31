"""A ttt run stops when its training loss turns NaN or infinite.

Every workload's backward pass goes through the GradScaler of its context
(``Context.grad_scaler()``): ``WatchedScaler.scale(loss)`` notes whether the
loss is finite, on the loss's device and without a synchronisation. The
driver asks ``LossWatch.diverged`` after each epoch; one all-reduce makes the
ranks agree, since each rank only sees its own losses (a NaN on one rank
reaches the others' weights through the averaged gradients one step later).
"""

from __future__ import annotations

import torch


class LossWatch:
    def __init__(self):
        self._bad = None  # on the device: a loss since the last question was NaN or infinite

    def note(self, loss) -> None:
        if isinstance(loss, torch.Tensor):
            bad = ~torch.isfinite(loss.detach()).all()
            self._bad = bad if self._bad is None else self._bad | bad

    def diverged(self, ctx) -> bool:
        """Whether any rank saw a non-finite loss since the last call (a collective: every rank of
        ``ctx`` calls it at the same point)."""
        bad = 0.0 if self._bad is None else float(self._bad)
        self._bad = None
        return ctx.all_sum([bad])[0] > 0


class WatchedScaler(torch.amp.GradScaler):
    """``torch.amp.GradScaler`` that hands every loss it scales to a ``LossWatch`` first."""

    def __init__(self, watch: LossWatch, device_type: str, enabled: bool):
        super().__init__(device_type, enabled=enabled)
        self.watch = watch

    def scale(self, outputs):
        self.watch.note(outputs)
        return super().scale(outputs)
