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


# --------------------------------------------------------------------------------------------
# Contenders measured in interleaved rounds (bench_peers, bench_playbooks)


@dataclass
class Contender:
    """One row: `run(r)` does round `r` of the workload (r < 0: warm-up) and returns the
    seconds it took (per step, per execution, whole: as the row's `per` says)."""

    name: str
    run: Callable[[int], float]
    extra: Callable[[], dict[str, object]] = dict


def interleaved(group: str, per: str, contenders: list[Contender], rounds: int) -> list[Row]:
    """Round r of every contender, then round r + 1: a slow patch of a noisy machine lands on
    one round of each, not on every round of one. The first contender is the baseline."""
    samples: dict[str, list[float]] = {c.name: [] for c in contenders}
    for r in range(rounds):
        for contender in contenders:
            samples[contender.name].append(contender.run(r))
    rows = [
        sampled(group, c.name, samples[c.name], per, baseline=i == 0, **c.extra())
        for i, c in enumerate(contenders)
    ]
    return with_ratios(rows)


def sampled(
    group: str, name: str, samples: list[float], per: str, *, baseline: bool, **extra: object
) -> Row:
    """A row of these samples (one per round), its median their median."""
    return Row(group, name, statistics.median(samples), per, len(samples), baseline, samples, extra)


def with_ratios(rows: list[Row]) -> list[Row]:
    """Give every other row of a group its ratio to the group's baseline, round by round, and
    the median of those ratios."""
    base = rows[0]
    for r in rows[1:]:
        r.extra.update(round_ratios(r.samples_s, base.samples_s))
    return rows


def round_ratios(numerator_s: list[float], denominator_s: list[float]) -> dict[str, object]:
    """The ratio of two contenders' samples round by round (`ratio_per_round`) and the median
    of those ratios (`ratio_median`), 4 significant digits."""
    ratios = [n / d for n, d in zip(numerator_s, denominator_s, strict=True)]
    return {
        "ratio_per_round": [float(f"{x:.4g}") for x in ratios],
        "ratio_median": float(f"{statistics.median(ratios):.4g}"),
    }


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
