"""Run every `bench/bench_*.py` module, print a Markdown table, write bench/results/latest.json.

python -m bench.run --quick     # make bench
python -m bench.run --full      # make bench-full
python -m bench.run --quick --only cbor,store
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

from bench.harness import Row

HERE = Path(__file__).resolve().parent
LIBRARIES = ["cbor2", "blake3", "lmdb", "pydantic", "wasmtime", "componentize-py", "dbos"]


def _environment() -> dict[str, object]:
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "libraries": versions,
        "when_unix_s": int(time.time()),
    }


def _format(value_s: float) -> str:
    if value_s >= 1:
        return f"{value_s:.2f} s"
    if value_s >= 1e-3:
        return f"{value_s * 1e3:.2f} ms"
    return f"{value_s * 1e6:.2f} µs"


def _table(rows: list[Row]) -> str:
    lines = ["| group | benchmark | median | per | ratio to baseline |", "|---|---|---|---|---|"]
    baselines: dict[str, float] = {}
    for r in rows:
        if r.baseline and r.group not in baselines:
            baselines[r.group] = r.median_s
    for r in rows:
        base = baselines.get(r.group)
        ratio = _ratio(r.median_s / base) if base else "-"
        lines.append(f"| {r.group} | {r.name} | {_format(r.median_s)} | {r.per} | {ratio} |")
    return "\n".join(lines)


def _ratio(value: float) -> str:
    return f"{value:.2f}x" if value >= 0.01 else f"{value:.2g}x"


def _round_ratio_table(rows: list[Row]) -> str:
    """Rows whose module measured them in rounds interleaved with their baseline's (bench_peers)
    carry their ratio to the baseline round by round: the spread shows how far a noisy
    machine moved the comparison."""
    lines = [
        "| group | benchmark | ratio to baseline, per round | median of ratios |",
        "|---|---|---|---|",
    ]
    for r in rows:
        ratios = r.extra.get("ratio_per_round")
        if not isinstance(ratios, list):
            continue
        each = " ".join(_ratio(x) for x in ratios)
        lines.append(
            f"| {r.group} | {r.name} | {each} | {_ratio(float(r.extra['ratio_median']))} |"
        )
    return "\n".join(lines) if len(lines) > 2 else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", default=True)
    mode.add_argument("--full", action="store_true")
    parser.add_argument("--only", default="", help="comma-separated topics (bench_<topic>.py)")
    args = parser.parse_args()
    quick = not args.full
    only = {t for t in args.only.split(",") if t}
    topics = sorted(p.stem[len("bench_") :] for p in HERE.glob("bench_*.py"))
    rows: list[Row] = []
    module_s: dict[str, float] = {}
    # What a module running another interpreter (bench_peers) reports of it.
    module_environments: dict[str, object] = {}
    for topic in topics:
        if only and topic not in only:
            continue
        module = importlib.import_module(f"bench.bench_{topic}")
        print(f"# running bench_{topic} ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        rows.extend(module.run(quick))
        if hasattr(module, "environment"):
            module_environments[topic] = module.environment()
        elapsed_s = time.perf_counter() - started
        module_s[topic] = round(elapsed_s, 1)
        print(f"# bench_{topic} took {elapsed_s:.1f} s", file=sys.stderr, flush=True)
    result = {
        "mode": "quick" if quick else "full",
        "environment": {**_environment(), "modules": module_environments},
        "module_s": module_s,
        "rows": [
            {
                "group": r.group,
                "name": r.name,
                "median_s": r.median_s,
                "per": r.per,
                "rounds": r.rounds,
                "baseline": r.baseline,
                "samples_s": r.samples_s,
                "extra": r.extra,
            }
            for r in rows
        ],
    }
    out = HERE / "results" / "latest.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(_table(rows))
    per_round = _round_ratio_table(rows)
    if per_round:
        print(f"\n{per_round}")
    print(f"\nresults: {out.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
