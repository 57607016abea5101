"""The compiled hot path (spec/09 §5): the mypyc build is what runs when it was built from these
sources, nothing else runs it, and it journals byte for byte what the sources journal.

The equivalence property plays random lives of two worlds (the scripted world: pings that ask
for effects, timers, emitted events or trap, receipts, snapshots, time; the C counter) in this
process, compiled, and in a helper process started with AOS_PURE_PYTHON=1, then compares every
journal record's bytes, the head, and each cell's state hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aos.kernel import compiled, compiled_build
from aos.kernel.errors import AosError
from aos.kernel.signing.signatures import signed_receipt
from aos.kernel.world.receipts import ReceiptError
from aos.kernel.world.stamps import PinnedStampSource
from aos.kernel.world.world import World
from tests.test_world import COUNTER_C, EVENT, SCRIPTED, engine, inc, ping, reset

REPO = Path(__file__).resolve().parent.parent
ADAPTER_SEED = bytes(range(32))  # demo/adapter@1 in the scripted fixture
PING = "demo/Ping@1"
KEYS = ["a", "b", "c"]

_op = st.one_of(
    st.tuples(
        st.just("send"),
        st.sampled_from(KEYS),
        st.sampled_from(["none", "effect", "timer", "emit", "trap"]),
        st.integers(0, 5_000),
    ),
    st.tuples(st.just("settle"), st.integers(0, 5), st.sampled_from(["ok", "error", "timeout"])),
    st.tuples(st.just("bad_receipt")),
    # Refused inputs: a value its schema does not admit, a schema nobody routes.
    st.tuples(
        st.just("refused"), st.sampled_from(KEYS), st.sampled_from(["bad_value", "unrouted"])
    ),
    st.tuples(st.just("snapshot")),
    st.tuples(st.just("advance"), st.integers(0, 5_000)),
    st.tuples(st.just("counter"), st.sampled_from(KEYS), st.integers(-3, 3), st.booleans()),
)


def _receipt(world: World, intent: str, status: str) -> Any:
    body = {
        "world": world.world_id,
        "intent": intent,
        "status": status,
        "payload": {"ok": True},
        "adapter": "demo/adapter@1",
        "started_ns": 10,
        "finished_ns": 20,
    }
    return signed_receipt(ADAPTER_SEED, body)


def _apply(scripted: World, counter: World, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "send":
        _, key, action, n = op
        scripted.send(PING, ping(key, action, n % 3 + 1 if action == "effect" else n))
    elif kind == "settle":
        untimed = sorted(i["intent"] for i in scripted.reader.open_intents() if i["due_ns"] is None)
        if untimed:
            scripted.settle(_receipt(scripted, untimed[op[1] % len(untimed)], op[2]))
            scripted.run_to_idle()
    elif kind == "bad_receipt":
        with pytest.raises(ReceiptError):
            scripted.settle(_receipt(scripted, "blake3:" + "0" * 64, "ok"))
    elif kind == "refused":
        _, key, how = op
        if how == "bad_value":
            scripted.ingress(PING, {"id": key, "n": -1, "action": "none"})
        else:
            scripted.ingress("demo/Unrouted@1", {"id": key})
    elif kind == "snapshot":
        scripted.snapshot()
        counter.snapshot()
    elif kind == "advance":
        scripted.advance_time(op[1])
    else:
        _, key, by, resets = op
        counter.ingress(EVENT, reset(key) if resets else inc(key, by))
        counter.run_to_idle()


def _outcome(world: World) -> dict[str, Any]:
    records = [data for _, data in world.store.journal.read_encoded()]
    cells = {
        workflow: [(c.key, str(c.state_hash), c.status) for c in world.reader.cells(workflow)]
        for workflow in sorted(world.reader.status()["workflows"])
    }
    return {
        "journal": [hashlib.sha256(data).hexdigest() for data in records],
        "status": world.reader.status(),
        "open_intents": world.reader.open_intents(),
        "cells": cells,
    }


def play(ops: list[tuple[Any, ...]], root: str) -> dict[str, Any]:
    """Both worlds' lives from genesis (pinned stamps, manual clock), and what they journaled.
    Runs in this process and in the pure-Python helper."""
    base = Path(root)
    stamps = PinnedStampSource(seed=b"compiled", start_ns=10**12)
    options: dict[str, Any] = {"sync": False, "clock": "manual", "engine": engine()}
    with (
        World.create(base / "s", SCRIPTED, stamps=stamps, **options) as scripted,
        World.create(base / "c", COUNTER_C, stamps=PinnedStampSource(), **options) as counter,
    ):
        refusals = []
        for op in ops:
            try:
                _apply(scripted, counter, tuple(op))
            except AosError as refused:  # the same refusal, type, code and text, on both
                refusals.append([type(refused).__name__, refused.code, str(refused)])
        outcome = {
            "scripted": _outcome(scripted),
            "counter": _outcome(counter),
            "refusals": refusals,
        }
    outcome["compiled"] = compiled.compiled_modules()
    return outcome


@pytest.fixture(scope="module")
def pure_python() -> Iterator[ProcessPoolExecutor]:
    """A helper process that imported the kernel from its sources (the variable is read when
    `aos.kernel` is first imported, so it is set only while the helper starts)."""
    saved = os.environ.get(compiled.PURE_PYTHON_ENV)
    os.environ[compiled.PURE_PYTHON_ENV] = "1"
    try:
        pool = ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn"))
        pool.submit(os.getpid).result(timeout=120)
    finally:
        if saved is None:
            del os.environ[compiled.PURE_PYTHON_ENV]
        else:
            os.environ[compiled.PURE_PYTHON_ENV] = saved
    with pool:
        yield pool


def _build_expected() -> bool:
    """Whether this process should run compiled: `make setup` built the kernel (a compiler is
    here) and nothing asked for pure Python."""
    return not compiled.pure_python_requested() and compiled_build.missing_compiler() is None


# --------------------------------------------------------------------------------------------
# Which code runs


def test_the_compiled_modules_run_when_built() -> None:
    if not _build_expected():
        assert compiled.compiled_modules() == []
        return
    import aos.kernel.world.world  # noqa: F401  (imports every compiled module)

    assert compiled.current_build() is not None, (
        "no build of these sources: run `make compile` (make setup and make test do)"
    )
    expected = sorted(
        "aos.kernel." + m.removesuffix(".py").replace("/", ".") for m in compiled_build.MODULES
    )
    assert compiled.compiled_modules() == expected
    from aos.kernel import cbor

    assert Path(cbor.__file__).suffix == ".so"
    build = json.loads(compiled.pointer_path().read_text())["build"]
    assert Path(cbor.__file__).is_relative_to(build)


def test_pure_python_runs_the_sources() -> None:
    script = (
        "import aos.kernel.world.world, aos.kernel.cbor as c, aos.kernel.compiled as k; "
        "print(k.compiled_modules(), c.__file__)"
    )
    env = {**os.environ, compiled.PURE_PYTHON_ENV: "1"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["[]", str(REPO / "kernel" / "cbor.py")]


def test_a_changed_source_loads_the_sources(tmp_path: Path) -> None:
    """The hash guard: a copy of the kernel's sources passes it, the same copy with one byte
    more in a module the build depends on (compiled or not) does not."""
    built = compiled.current_build()
    if not _build_expected():
        assert built is None or compiled.pure_python_requested()
        return
    assert built is not None
    kernel = tmp_path / "kernel"
    shutil.copytree(compiled.KERNEL_DIR, kernel, ignore=shutil.ignore_patterns("__pycache__"))
    assert compiled.current_build(kernel) == built
    for changed in ("cbor.py", "world/limits.py"):
        source = kernel / changed
        original = source.read_bytes()
        source.write_bytes(original + b"\n")
        assert compiled.current_build(kernel) is None, changed
        source.write_bytes(original)
    assert compiled.current_build(kernel) == built


def test_the_build_closure_holds_what_the_modules_import() -> None:
    sources = compiled_build.closure(compiled_build.MODULES)
    assert set(compiled_build.MODULES) <= set(sources)
    # cbor's errors, the packages the modules sit in, and a limit stepping reads.
    assert {"errors.py", "__init__.py", "world/__init__.py", "world/limits.py"} <= set(sources)
    assert "node/app.py" not in sources


def test_the_cache_keeps_the_most_recently_used_builds(tmp_path: Path) -> None:
    kept_max = compiled_build.BUILDS_KEPT_MAX
    folders = []
    for age in range(kept_max + 2):  # folder 0 is the newest
        folder = tmp_path / f"build-{age}"
        folder.mkdir()
        (folder / compiled.MANIFEST_NAME).write_text("{}")
        os.utime(folder / compiled.MANIFEST_NAME, (10**9 - age, 10**9 - age))
        folders.append(folder)
    (tmp_path / "last-build.log").write_text("")
    oldest = folders[-1]  # the one just built, whatever its time
    compiled_build.prune(tmp_path, keep=oldest)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(
        ["last-build.log", oldest.name, *(f.name for f in folders[: kept_max - 1])]
    )
    compiled_build.prune(tmp_path, keep=oldest, kept_max=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["last-build.log", oldest.name])


def test_without_a_compiler_setup_says_so_once_and_succeeds(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PATH": str(tmp_path),  # no cc, gcc or anything else
        "AOS_CACHE_DIR": str(tmp_path / "cache"),  # and no earlier build of these sources
    }
    env.pop(compiled.PURE_PYTHON_ENV, None)
    pointer = compiled.pointer_path()
    before = pointer.read_bytes() if pointer.exists() else None
    done = subprocess.run(
        [sys.executable, "-m", "aos.kernel.compiled_build"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "the kernel runs as pure Python (slower)" in done.stderr
    assert (pointer.read_bytes() if pointer.exists() else None) == before


# --------------------------------------------------------------------------------------------
# Compiled == pure Python, byte for byte


@settings(max_examples=6, deadline=None)
@given(ops=st.lists(_op, min_size=1, max_size=14))
def test_compiled_and_pure_python_journal_the_same_bytes(
    pure_python: ProcessPoolExecutor, tmp_path_factory: pytest.TempPathFactory, ops: list[Any]
) -> None:
    root = tmp_path_factory.mktemp("compiled")
    here = play(ops, str(root / "here"))
    there = pure_python.submit(play, ops, str(root / "there")).result(timeout=240)
    assert there.pop("compiled") == []
    assert bool(here.pop("compiled")) == _build_expected()
    assert here == there


def test_a_compiled_frame_of_a_traceback_shows_its_source_line() -> None:
    """A traceback through a compiled module names a file that exists (the copy of the
    build's sources beside it, no link into a checkout) and shows the line that raised."""
    if not _build_expected():
        return
    script = (
        "import traceback, aos.kernel.cbor as c\n"
        "try:\n"
        "    c.decode(bytes.fromhex('f6'))  # canonical bytes start d9d9f7\n"
        "except Exception as error:\n"
        "    frame = traceback.extract_tb(error.__traceback__)[-1]\n"
        "    print(c.__file__); print(frame.filename); print(frame.lineno); print(frame.line)\n"
    )
    found = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    module, filename, lineno, line = found
    assert module.endswith(".so")
    source = REPO / "kernel" / "cbor.py"
    assert Path(filename).read_bytes() == source.read_bytes()  # the build loads only then
    assert not any(p.is_symlink() for p in (Path(filename), *Path(filename).parents))
    assert line == source.read_text().splitlines()[int(lineno) - 1].strip()
    assert "raise" in line
