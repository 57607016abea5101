"""The peer benchmark's own logic (bench/bench_peers.py, bench/run.py); the benchmark itself
runs under `make bench`, with DBOS in its own virtualenv, never here."""

from __future__ import annotations

import ast

import pytest

from bench import bench_peers, harness, run
from bench.harness import Row


def test_plain_chains_run_the_chain_handler_to_the_end() -> None:
    handler = bench_peers._chain_module().on_event
    bench_peers._plain_chains(handler, ["a", "b", "c"], 4)  # asserts every chain is done


def test_plain_chains_reject_a_handler_that_stops_early() -> None:
    def stops(state: object, event: dict[str, object], ctx: bench_peers._Ctx) -> object:
        return {"done": 0}  # never emits an effect

    with pytest.raises(AssertionError):
        bench_peers._plain_chains(stops, ["a"], 2)


def test_interleaved_rounds_give_per_round_ratios_to_the_first_contender() -> None:
    order: list[tuple[str, int]] = []

    def contender(name: str, seconds: list[float]) -> harness.Contender:
        def run_round(r: int) -> float:
            order.append((name, r))
            return seconds[r]

        return harness.Contender(name, run_round, lambda: {"side": name})

    rows = harness.interleaved(
        "g",
        "step",
        [contender("aos", [1.0, 2.0, 4.0]), contender("peer", [3.0, 2.0, 2.0])],
        3,
    )
    assert order == [("aos", 0), ("peer", 0), ("aos", 1), ("peer", 1), ("aos", 2), ("peer", 2)]
    assert [r.baseline for r in rows] == [True, False]
    assert rows[1].extra["ratio_per_round"] == [3.0, 1.0, 0.5]
    assert rows[1].extra["ratio_median"] == 1.0
    assert rows[1].median_s == 2.0 and rows[1].extra["side"] == "peer"
    assert "ratio_per_round" not in rows[0].extra


def test_runner_prints_per_round_ratios_only_for_rows_that_have_them() -> None:
    rows = [
        Row("g", "base", 1.0, baseline=True, samples_s=[1.0]),
        Row(
            "g", "peer", 2.0, samples_s=[2.0], extra={"ratio_per_round": [2.0], "ratio_median": 2.0}
        ),
        Row("h", "other", 1.0, baseline=True),
    ]
    table = run._round_ratio_table(rows)
    assert "| g | peer | 2.00x | 2.00x |" in table
    assert "| base |" not in table and "| other |" not in table
    assert run._round_ratio_table(rows[2:]) == ""


def test_small_ratios_keep_two_significant_digits() -> None:
    assert run._ratio(1.234) == "1.23x"
    assert run._ratio(0.00053) == "0.00053x"


def test_dbos_workload_parses_without_dbos_installed() -> None:
    # It runs in .venv-bench; here only its syntax is checked (importing it needs dbos).
    ast.parse(bench_peers.DBOS_WORKLOAD.read_text())
