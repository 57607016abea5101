"""Before/after of `bench_postgres` on a noisy machine: run it in two checkouts, alternating,
keep each run's `bench/results/latest.json`, then compare. Samples of a row are pooled over
all runs of a side; ratios are taken round by round inside each run (the rows of a group
run interleaved), then pooled, so the load of other jobs falls on both sides alike.

    for i in 1 2 3 4 5 6; do
      (cd ../base && .venv/bin/python -m bench.run --only postgres \\
         && cp bench/results/latest.json /tmp/pg-base-$i.json)
      .venv/bin/python -m bench.run --only postgres && cp bench/results/latest.json /tmp/pg-new-$i.json
    done
    .venv/bin/python -m bench.postgres_ab /tmp/pg-base-*.json -- /tmp/pg-new-*.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

Run = list[dict[str, Any]]


def compare(base_files: list[str], new_files: list[str]) -> str:
    base, new = _runs(base_files), _runs(new_files)
    lines = [
        f"runs: base {len(base)}, new {len(new)}; medians of pooled samples; ratios are the "
        "median of per-round ratios to the group's baseline (aos on PostgreSQL)",
        "| group | row | base | new | new/base | base ratio | new ratio | round trips/step |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in base[0]:
        key = (row["group"], row["name"])
        b, n = _samples(base, key), _samples(new, key)
        unit, scale = ("µs", 1e6) if row["per"] == "round trip" else ("ms", 1e3)
        lines.append(
            f"| {row['group']} | {row['name']} "
            f"| {statistics.median(b) * scale:.2f} {unit} | {statistics.median(n) * scale:.2f} "
            f"{unit} | {statistics.median(n) / statistics.median(b):.2f}x "
            f"| {_ratio(base, key)} | {_ratio(new, key)} "
            f"| {_trips(base, new, key)} |"
        )
    return "\n".join(lines)


def _runs(files: list[str]) -> list[Run]:
    return [json.loads(Path(path).read_text())["rows"] for path in files]


def _find(run: Run, key: tuple[str, str]) -> dict[str, Any]:
    return next(row for row in run if (row["group"], row["name"]) == key)


def _samples(runs: list[Run], key: tuple[str, str]) -> list[float]:
    return [x for run in runs for x in _find(run, key)["samples_s"]]


def _ratio(runs: list[Run], key: tuple[str, str]) -> str:
    """Per round, this row's time over the baseline's: the baseline is that much faster."""
    ratios = []
    for run in runs:
        row = _find(run, key)
        baseline = next(r for r in run if r["group"] == row["group"] and r["baseline"])
        ratios += [x / b for x, b in zip(row["samples_s"], baseline["samples_s"], strict=True)]
    return f"{statistics.median(ratios):.2f}x"


def _trips(base: list[Run], new: list[Run], key: tuple[str, str]) -> str:
    """Round trips per step, base -> new (aos on PostgreSQL rows only)."""
    sides = []
    for runs in (base, new):
        trips = {_find(run, key)["extra"].get("round_trips_per_step") for run in runs}
        sides.append("/".join(str(t) for t in sorted(trips - {None})))
    return " -> ".join(sides) if any(sides) else ""


def main(argv: list[str]) -> None:
    if "--" not in argv:
        sys.exit(__doc__)
    split = argv.index("--")
    print(compare(argv[:split], argv[split + 1 :]))


if __name__ == "__main__":
    main(sys.argv[1:])
