"""Measurement helpers shared by every benchmark module.

A benchmark module is `bench/bench_<topic>.py` with `run(quick: bool) -> list[Row]`. Rows of
one group are compared against the group's baseline row (the first row marked `baseline`),
measured in the same run, so the ratios survive a noisy machine better than absolute figures.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Row:
    group: str
    name: str
    median_s: float
    per: str = "op"
    rounds: int = 0
    baseline: bool = False
    samples_s: list[float] = field(default_factory=list)
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def median_us(self) -> float:
        return self.median_s * 1e6


def measure(
    fn: Callable[[], object], *, number: int, rounds: int, warmup: int = 1
) -> tuple[float, list[float]]:
    """Run `fn` `number` times per round for `rounds` rounds; return the median seconds per
    call and the per-round samples."""
    for _ in range(warmup):
        fn()
    samples: list[float] = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples), samples


def row(
    group: str,
    name: str,
    fn: Callable[[], object],
    *,
    number: int,
    rounds: int,
    per: str = "op",
    baseline: bool = False,
    **extra: object,
) -> Row:
    median, samples = measure(fn, number=number, rounds=rounds)
    return Row(group, name, median, per, rounds, baseline, samples, dict(extra))


def quit_child(popen: subprocess.Popen[str], timeout_s: float) -> None:
    """End a JSON-lines peer process (bench_peers, bench_flowlang): send `{"op": "quit"}`,
    close its input, wait up to `timeout_s`, then kill it."""
    if popen.poll() is None:
        assert popen.stdin is not None
        popen.stdin.write(json.dumps({"op": "quit"}) + "\n")
        popen.stdin.close()
    try:
        popen.wait(timeout_s)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait()
