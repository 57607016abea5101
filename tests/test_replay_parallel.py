"""The parallel path of a replay audit (kernel/audit/replay_parallel.py): the report, clean or
diverged, is the same with 1 and N workers; a fresh re-run in a worker agrees with the reused
instance, and catches one that keeps hidden state."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from aos.cli.main import main as aos_main
from aos.kernel import cbor
from aos.kernel.audit import replay
from aos.kernel.audit.replay_parallel import (
    ChecksDisagreedError,
    FreshChecks,
    SpeculativeRunner,
    audit_runner,
)
from aos.kernel.hashing import Hash
from aos.kernel.wasm import StepLimits, StepRunner, WasmEngine, encode_input
from aos.kernel.world import records
from aos.kernel.world.replayer import same_bytes
from aos.kernel.world.world import WorldLimits
from tests.test_chain import counter_world as chained_world
from tests.test_chain import flip_entropy, rewrite_record, store_digest
from tests.test_replay import _rewrite_record, _seq_of, counter_world, scripted_world
from tests.test_world import EVENT, create, inc
from tests.wasm_guests import counter_c, counter_input, increment, shared_engine, wat

WORKER_COUNTS = (1, 3)
REPO = Path(__file__).resolve().parent.parent
COUNTER_PY = REPO / "manifests" / "counter"


def _reports(path: Path, **options: Any) -> list[dict[str, Any]]:
    """The report of each worker count, with the parallel path taken even for a small world."""
    return [
        replay.verify_replay(
            path, workers_max=workers, parallel_records_min=0, **options
        ).to_value()
        for workers in WORKER_COUNTS
    ]


def _all_equal(reports: list[dict[str, Any]]) -> dict[str, Any]:
    assert all(report == reports[0] for report in reports[1:])
    return reports[0]


def python_world(path: Path, *, snapshot_after: int | None = None) -> None:
    """The counter world of test_replay with the Python counter: a component, whose steps
    the parallel path speculates on (a core module's run fresh in the replaying process)."""
    with create(path, COUNTER_PY) as world:
        for n in range(12):
            world.send(EVENT, inc(f"k{n % 4}", n + 1))
            if snapshot_after is not None and n == snapshot_after:
                world.snapshot()


def test_a_clean_world_reports_the_same_with_any_number_of_workers(tmp_path: Path) -> None:
    path = tmp_path / "w"
    python_world(path, snapshot_after=5)
    report = _all_equal(_reports(path))
    assert report["ok"] and report["steps"] == 12
    seq, _ = _seq_of(path, records.SNAPSHOT)
    assert _all_equal(_reports(path, from_snapshot=str(seq)))["ok"]


def test_every_record_kind_reports_the_same_with_any_number_of_workers(tmp_path: Path) -> None:
    path = tmp_path / "w"
    scripted_world(path)
    assert _all_equal(_reports(path))["ok"]


def test_a_tampered_step_record_is_the_same_first_divergence(tmp_path: Path) -> None:
    path = tmp_path / "w"
    python_world(path)
    seq, _ = _seq_of(path, records.STEP, 3)
    _rewrite_record(path, seq, lambda record: record.update(state="blake3:" + "e" * 64))
    divergence = _all_equal(_reports(path))["divergence"]
    assert (divergence["seq"], divergence["what"], divergence["fields"]) == (
        seq,
        "record_differs",
        ["state"],
    )


def test_a_tampered_input_is_the_same_first_divergence(tmp_path: Path) -> None:
    path = tmp_path / "w"
    python_world(path)
    seq, _ = _seq_of(path, records.DOMAIN_EVENT, 2)
    _rewrite_record(path, seq, lambda record: record["value"]["$value"].update(by=1000))
    divergence = _all_equal(_reports(path))["divergence"]
    assert (divergence["seq"], divergence["kind"]) == (seq + 1, "step")


def test_a_change_only_the_chain_shows_is_the_same_chain_break(tmp_path: Path) -> None:
    path = tmp_path / "w"
    seq = chained_world(path, manifest=COUNTER_PY)
    rewrite_record(path, seq, flip_entropy)
    before = store_digest(path)
    divergence = _all_equal(_reports(path))["divergence"]
    assert (divergence["what"], divergence["seq"]) == ("chain_broken", seq)
    assert store_digest(path) == before  # replaying changes nothing


def test_only_components_speculate() -> None:
    engine = shared_engine()
    core = engine.load(counter_c(), abi="core")
    with _checks(engine, counter_c()) as checks:
        assert type(audit_runner(core, StepLimits(), checks)) is StepRunner


def _inputs(count: int) -> list[bytes]:
    return [counter_input(None, increment("a", n + 1)) for n in range(count)]


def _checks(engine: WasmEngine, wasm: bytes, workers: int = 1) -> FreshChecks:
    return FreshChecks(workers, lambda _hash: wasm, engine)


def test_fresh_runs_in_a_worker_agree_with_the_reused_instance() -> None:
    engine = shared_engine()
    module = engine.load(counter_c(), abi="core")
    reference = StepRunner(module, determinism="strict")
    with _checks(engine, counter_c(), workers=2) as checks:
        runner = SpeculativeRunner(module, StepLimits(), checks)
        results = [runner.step(data, seq=n) for n, data in enumerate(_inputs(5))]
        assert checks.finish() and checks.checked == 4  # the first call is a fresh instance
    expected = [reference.step(data, seq=n).output_bytes for n, data in enumerate(_inputs(5))]
    assert [result.output_bytes for result in results] == expected
    assert [result.warm for result in results] == [False, True, True, True, True]


def test_hidden_state_on_the_reused_instance_is_caught_by_a_worker() -> None:
    engine = shared_engine()
    wasm = wat("hidden_state")
    module = engine.load(wasm, abi="core")
    data = encode_input(state=None, event_schema="demo/E@1", event_value=cbor.encode(None))
    with _checks(engine, wasm) as checks:
        runner = SpeculativeRunner(module, StepLimits(), checks)
        states = [runner.step(data, seq=n).output.state for n in range(3)]
        assert states == [cbor.encode(n) for n in (1, 2, 3)]  # what the reused instance said
        assert not checks.finish()  # a fresh instance says 1 every time
        with pytest.raises(ChecksDisagreedError):
            runner.step(data, seq=3)  # the replay stops: only the reference can tell


def test_a_step_the_reused_instance_cannot_decide_goes_to_the_reference() -> None:
    # A guest that traps only when reused: the reference (a fresh instance) decides the step.
    source = "(i32.store8 (i32.const 14) (global.get $steps))"
    trap = f"(if (i32.gt_u (global.get $steps) (i32.const 1)) (then unreachable)) {source}"
    wasm = wat("hidden_state", **{source: trap})
    engine = shared_engine()
    data = encode_input(state=None, event_schema="demo/E@1", event_value=cbor.encode(None))
    with _checks(engine, wasm) as checks:
        runner = SpeculativeRunner(engine.load(wasm, abi="core"), StepLimits(), checks)
        results = [runner.step(data, seq=n) for n in range(3)]
        assert [r.output.state for r in results] == [cbor.encode(1)] * 3
        assert checks.finish() and checks.checked == 0


def test_workers_below_one_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "w"
    counter_world(path)
    before = store_digest(path)
    for bad in (0, -1):
        with pytest.raises(replay.ReplayWorkersInvalidError) as raised:
            replay.verify_replay(path, workers_max=bad)
        assert raised.value.code == "replay.workers_invalid"
    result = CliRunner().invoke(
        aos_main, ["world", "replay", "--verify", "--workers", "0", "--world", str(path)]
    )
    assert result.exit_code != 0 and "replay.workers_invalid" in result.output
    assert store_digest(path) == before


def test_the_cli_takes_a_number_of_workers(tmp_path: Path) -> None:
    path = tmp_path / "w"
    counter_world(path)
    for workers in ("1", "2"):
        result = CliRunner().invoke(
            aos_main,
            ["world", "replay", "--verify", "--workers", workers, "--world", str(path)],
        )
        assert result.exit_code == 0 and "ok: every record and the head match" in result.output


def test_a_lost_worker_means_the_reference_decides() -> None:
    engine = shared_engine()
    module = engine.load(counter_c(), abi="core")

    def no_module(_hash: Hash) -> bytes:
        return b"not wasm"  # the worker fails to load it and exits

    with FreshChecks(1, no_module, engine) as checks:
        runner = SpeculativeRunner(module, StepLimits(), checks)
        for n, data in enumerate(_inputs(3)):
            runner.step(data, seq=n)
        assert not checks.finish()


@pytest.mark.parametrize(
    "value",
    [
        {"kind": "step", "n": 1, "key": b"\x01", "list": [1, "a", None, True]},
        {"kind": "domain_event", "value": {"f": 1.5, "g": 1.1, "h": -0.0}},  # floats: no shortcut
        {
            "kind": "x",
            "big": 2**64 - 1,
            "neg": -(2**64),
            "nested": {"b": 1, "aa": 2, "c": {"zz": [1.0e300]}},
        },
    ],
)
def test_a_record_compares_equal_to_its_stored_bytes_and_only_to_them(value: Any) -> None:
    stored = cbor.encode(value)
    recorded = cbor.decode(stored)  # as the replay reads it: strictly, in canonical order
    assert same_bytes(stored, recorded)
    changed = cbor.encode({**value, "kind": "other"})
    assert not same_bytes(changed, recorded)


def _hidden_state_world(path: Path, tmp: Path) -> None:
    """A Python counter that adds how many times its instance was called to each count:
    stepped live on a warm instance (`checked`, never sampled), its journal holds what a
    fresh instance never gives."""
    manifest = tmp / "manifest"
    shutil.copytree(COUNTER_PY, manifest)
    module = manifest / "module"  # artifact paths are relative to the file naming them
    module.mkdir()
    source = (REPO / "modules" / "examples" / "counter_py" / "counter.py").read_text()
    marker = "    count = state.count + event.by\n"
    assert marker in source
    hidden = "    _CALLS.append(1)\n    count = state.count + event.by + len(_CALLS)\n"
    source = source.replace(marker, hidden).replace(
        "THRESHOLD_STEP = 10\n", "THRESHOLD_STEP = 10\n_CALLS: list[int] = []\n"
    )
    (module / "counter.py").write_text(source)
    definitions = manifest / "defs" / "counter.yaml"
    text = definitions.read_text().replace("../../../modules/examples/counter_py", "../module")
    definitions.write_text(text)
    with create(path, manifest, limits=WorldLimits(checked_sample_rate=0.0)) as world:
        for n in range(6):
            world.send(EVENT, inc(f"k{n % 2}", 1))


def test_a_module_with_hidden_state_falls_back_to_the_same_report(tmp_path: Path) -> None:
    path = tmp_path / "w"
    _hidden_state_world(path, tmp_path)
    divergence = _all_equal(_reports(path))["divergence"]
    # The reused instance of the replay would agree with the warm one of the live run; the
    # workers' fresh runs do not, so the report is the reference's: the first warm step.
    assert divergence["what"] == "record_differs" and divergence["kind"] == "step"
    assert divergence["fields"] == ["state"]
