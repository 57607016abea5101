"""A histogram's buckets, counted in place: what the node's metrics show of durations and sizes
(kernel/node/metrics.py) and of the store's commits (kernel/store/interface.py `CommitTimes`).
Written by one thread; a reader takes a `copied()` one on that thread."""

from __future__ import annotations

from dataclasses import dataclass, field

# Upper bounds of the buckets of a duration, in seconds: from a commit that syncs nothing (the
# page cache, ~0.1 ms) to a slow disk's syncs or a batch of thousands of steps (seconds).
SECONDS_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    10.0,
)


@dataclass
class Buckets:
    """A histogram's cumulative bucket counts and sum, kept by one thread."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    observed: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.bounds)

    def observe(self, value: float) -> None:
        self.observed += 1
        self.total += value
        for index, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[index] += 1
                return

    def add(self, other: Buckets) -> None:
        """Count what `other` counted too (the same bounds)."""
        if other.bounds != self.bounds:
            raise ValueError("buckets with other bounds cannot be added")
        self.counts = [
            mine + theirs for mine, theirs in zip(self.counts, other.counts, strict=True)
        ]
        self.total += other.total
        self.observed += other.observed

    def copied(self) -> Buckets:
        copy = Buckets(self.bounds)
        copy.counts = list(self.counts)
        copy.total, copy.observed = self.total, self.observed
        return copy

    def cumulative(self) -> list[tuple[str, float]]:
        """`(le, count)` pairs, `+Inf` last, as the exposition format wants them."""
        found, running = [], 0
        for bound, count in zip(self.bounds, self.counts, strict=True):
            running += count
            found.append((_bound_text(bound), float(running)))
        found.append(("+Inf", float(self.observed)))
        return found


def _bound_text(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else repr(float(bound))
