"""Which GPU holds which part of the plan: ranks laid out TP-innermost, as Megatron does.

A rank has coordinates (tp, cp, dp, pp). With the default order
"tp-cp-dp-pp", rank = tp + TP*(cp + CP*(dp + DP*pp)): tensor-parallel peers are
consecutive GPUs (inside one node when TP <= GPUs per node), then context-,
data- and pipeline-parallel peers further apart (Megatron-LM
initialize_model_parallel). A scenario can give another order.

>>> p = Placement(tp=2, cp=1, dp=2, pp=2)
>>> p.rank(tp=1, cp=0, dp=0, pp=1)
5
>>> p.group("dp", p.coords(5))
(5, 7)
"""

from __future__ import annotations

from dataclasses import dataclass

DIMS = ("tp", "cp", "dp", "pp")


@dataclass(frozen=True, slots=True)
class Placement:
    tp: int
    cp: int
    dp: int
    pp: int
    order: tuple[str, ...] = DIMS     # innermost first
    ep: int = 1                       # expert parallelism, cut from cp x dp (scalesim/parallel/experts.py)
    etp: int | None = None            # expert tensor parallelism: tp [None] or 1 (experts whole, EP over tp too)

    @property
    def size(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    def _sizes(self) -> dict[str, int]:
        return {"tp": self.tp, "cp": self.cp, "dp": self.dp, "pp": self.pp}

    def rank(self, **coords: int) -> int:
        sizes = self._sizes()
        rank, stride = 0, 1
        for dim in self.order:
            rank += coords[dim] * stride
            stride *= sizes[dim]
        return rank

    def coords(self, rank: int) -> dict[str, int]:
        sizes = self._sizes()
        out = {}
        for dim in self.order:
            out[dim] = rank % sizes[dim]
            rank //= sizes[dim]
        return out

    def group(self, dim: str, coords: dict[str, int]) -> tuple[int, ...]:
        """Ranks that differ from `coords` only along `dim`, in order."""
        return tuple(self.rank(**{**coords, dim: i}) for i in range(self._sizes()[dim]))

    def grad_group(self, coords: dict[str, int]) -> tuple[int, ...]:
        """Ranks that hold the same parameters and reduce gradients together: DP x CP (Megatron)."""
        return tuple(sorted({self.rank(**{**coords, "dp": d, "cp": c})
                             for d in range(self.dp) for c in range(self.cp)}))

    def symmetric_copies(self, group: tuple[int, ...], span: tuple[str, ...]) -> list[tuple[int, ...]]:
        """The copies of `group` that differ from it in the dimensions outside `span`, except pp:
        the groups running the same call at the same time.

        >>> Placement(tp=2, cp=1, dp=2, pp=2).symmetric_copies((0, 2), ("dp",))
        [(1, 3)]
        """
        base = self.coords(group[0])
        if span == ("replica",):        # HSDP's replicas: every shard-th dp rank; copies: the other residues
            stride = self.coords(group[1])["dp"] - base["dp"]
            return [tuple(self.rank(**{**c, "dp": c["dp"] - base["dp"] + k}) for c in map(self.coords, group))
                    for k in range(stride) if k != base["dp"]]
        vary = [d for d in ("tp", "cp", "dp") if d not in span]
        sizes = self._sizes()
        strides, stride = {}, 1
        for dim in self.order:          # rank = sum of coordinate x stride (`rank`)
            strides[dim], stride = stride, stride * sizes[dim]
        # A copy sets the varied coordinates to a combination (the last dimension varying fastest):
        # each rank moves by the combination's offset less its own.
        offsets = [0]
        for d in vary:
            offsets = [o + i * strides[d] for o in offsets for i in range(sizes[d])]
        own = sum(base[d] * strides[d] for d in vary)
        held = [r - sum(c[d] * strides[d] for d in vary) for r in group for c in (self.coords(r),)]
        return [tuple([r + o for r in held]) for o in offsets if o != own]
