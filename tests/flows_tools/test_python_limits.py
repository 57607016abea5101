"""The confinement of python tasks (kernel/adapters/builtin/python_limits.py, spec/10 §4.5):
inline code and `function` calls alike run without root, cannot read the adapter's key, and
cross their memory and CPU limits as typed errors (`python.memory_exceeded`,
`python.cpu_exceeded`), after which the worker is replaced and the adapter goes on. Both
inline cases also through `aos adapter run tool-python` against a real `aos node up`."""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from click.testing import CliRunner

from aos.cli.adapter_cmd import adapter_group
from aos.flows.tools import pyworker
from aos.flows.tools.context import ToolContext
from aos.flows.tools.dispatch import run_tool
from aos.flows.tools.outcomes import ToolOutcome
from aos.kernel.adapters.builtin import python_limits
from aos.kernel.adapters.builtin.python_limits import PythonLimits, can_reach
from aos.kernel.adapters.sdk import AdapterConfigInvalidError
from aos.kernel.signing.keys import write_seed
from tests.conftest import readable_folder
from tests.flows_tools.test_tools import (  # the module's node: a probe world's real node
    SEEDS,
    Node,
    probe,
    run_adapter,
    state,
)
from tests.flows_tools.test_tools import node as node
from tests.flows_tools.test_tools import server as server

EFFECT = "aos/tool.python@1"
ALLOCATE_4_GB = "block = bytearray(4 * 1024**3)\nresult = len(block)"
SPIN = "while True:\n    pass"
IGNORE_SIGXCPU = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\n" + SPIN
PID = "import os\nresult = os.getpid()"
ROOT = os.geteuid() == 0
FUNCTIONS = """
import os

def allocate(params):
    return len(bytearray(4 * 1024**3))

def spin(params):
    while True:
        pass

def identity(params):
    return [os.getuid(), os.getgroups()]
"""


def run(code: str, limits: PythonLimits | None = None, **tool: Any) -> ToolOutcome:
    context = ToolContext(intent="blake3:i", python_limits=limits or PythonLimits())
    params = {"tool": {"kind": "python", "code": code, **tool}, "args": {}}
    return run_tool(EFFECT, params, context=context)


def run_function(name: str, folder: Path, limits: PythonLimits | None = None) -> ToolOutcome:
    context = ToolContext(
        intent="blake3:i",
        python_allow=("limit_fns",),
        python_paths=(folder,),
        python_limits=limits or PythonLimits(),
    )
    params = {"tool": {"kind": "python", "function": f"limit_fns:{name}"}, "args": {}}
    return run_tool(EFFECT, params, context=context)


def code_of(outcome: ToolOutcome) -> str:
    assert outcome.status == "error", outcome
    return str(cast(dict[str, Any], outcome.payload)["code"])


@pytest.fixture(name="functions", scope="module")
def functions_fixture() -> Iterator[Path]:
    with readable_folder() as folder:
        (folder / "limit_fns.py").write_text(FUNCTIONS)
        yield folder


@pytest.fixture(name="key_folder")
def key_folder_fixture(tmp_path: Path) -> Path:
    """An adapter's key folder as `aos adapter keygen` leaves it: the key mode 0600."""
    folder = tmp_path / "keys"
    folder.mkdir(mode=0o700)
    write_seed(folder / "python.key", SEEDS["python"])
    return folder


# --------------------------------------------------------------------------------------------
# Memory and CPU


def test_allocating_4_gb_is_memory_exceeded_and_the_worker_is_replaced() -> None:
    before = run(PID).payload
    assert code_of(run(ALLOCATE_4_GB, timeout_ms=60_000)) == "python.memory_exceeded"
    after = run(PID)
    assert after.status == "ok" and after.payload != before  # a new worker serves on


def test_a_busy_loop_is_cpu_exceeded_even_when_it_ignores_sigxcpu() -> None:
    limits = PythonLimits(cpu_s_max=1)
    for code in (SPIN, IGNORE_SIGXCPU):
        assert code_of(run(code, limits, timeout_ms=120_000)) == "python.cpu_exceeded"
        assert run("result = 1", limits).payload == 1


def test_a_worker_near_its_lifetime_cpu_is_replaced_before_a_call() -> None:
    # A call's limit as large as a worker's whole life: no worker is ever reused.
    options = pyworker.PoolOptions(limits=PythonLimits(cpu_s_max=python_limits.WORKER_CPU_S_MAX))
    pool = pyworker.pool_for(options)
    started = pool.started
    for _ in range(3):
        assert pool.run({"code": "result = 1", "args": {}, "libs": {}, "seed": "s"}, 30) == {
            "ok": 1
        }
    assert pool.started - started == 3


def test_a_function_crosses_its_limits_as_typed_errors(functions: Path) -> None:
    assert code_of(run_function("allocate", functions)) == "python.memory_exceeded"
    assert code_of(run_function("spin", functions, PythonLimits(cpu_s_max=1))) == (
        "python.cpu_exceeded"
    )


@pytest.mark.parametrize(
    "given",
    [
        {"memory_bytes_max": 1024},
        {"memory_bytes_max": 2.5},
        {"cpu_s_max": 0},
        {"cpu_s_max": True},
    ],
)
def test_limits_out_of_range_are_refused(given: dict[str, Any]) -> None:
    with pytest.raises(AdapterConfigInvalidError):
        PythonLimits(**given)


# --------------------------------------------------------------------------------------------
# No root, no key


def test_the_worker_runs_without_root_and_without_the_adapters_environment(
    functions: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AOS_SECRET_db", "hunter2")
    inline = run("import os\nresult = [os.getuid(), os.getgroups(), sorted(os.environ)]")
    function = run_function("identity", functions)
    assert inline.status == function.status == "ok"
    uid, groups, environment = cast(list[Any], inline.payload)
    assert environment == ["LANG", "PATH"]
    if ROOT:  # the tests run as root here: tasks run as nobody, in no group
        nobody = pwd.getpwnam(python_limits.WORKER_USER_DEFAULT).pw_uid
        assert (uid, groups) == (nobody, [])
        assert function.payload == [nobody, []]
    else:  # not root: tasks run as the adapter's own user (documented)
        assert uid == os.geteuid()


def test_the_worker_cannot_read_the_adapters_key_folder(key_folder: Path) -> None:
    key = key_folder / "python.key"
    read = run(f"result = open({str(key)!r}).read()")
    listed = run(f"import os\nresult = os.listdir({str(key_folder)!r})")
    if ROOT:
        for outcome in (read, listed):
            assert code_of(outcome) == "python.raised"
            assert cast(dict[str, Any], outcome.payload)["py"] == {"exception": "PermissionError"}
    else:
        assert read.status == "ok"  # documented: run such an adapter as a user of its own


def test_a_root_adapter_refuses_a_key_its_worker_user_could_read(tmp_path: Path) -> None:
    with readable_folder() as folder:
        key = folder / "python.key"
        write_seed(key, SEEDS["python"])
        key.chmod(0o644)
        where = ["--node", "http://127.0.0.1:9", "--key", str(key), "--json"]
        result = CliRunner().invoke(adapter_group, ["run", "tool-python", *where])
        if ROOT:
            assert result.exit_code == 1
            assert '"adapter.config_invalid"' in result.output
            assert "chmod 600" in result.output
        else:
            assert "can read what it can" in result.stderr


def test_can_reach_reads_the_bits_on_the_way(tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    with readable_folder() as folder:
        shared = folder / "shared.txt"
        shared.write_text("x")
        shared.chmod(0o644)
        assert can_reach(shared, nobody, os.R_OK)
        assert not can_reach(shared, nobody, os.X_OK)
        shared.chmod(0o600)
        assert not can_reach(shared, nobody, os.R_OK)
        inner = folder / "inner"
        inner.mkdir(mode=0o700)
        (inner / "open.txt").write_text("x")
        (inner / "open.txt").chmod(0o644)
        assert not can_reach(inner / "open.txt", nobody, os.R_OK)  # the folder is closed
        assert not can_reach(folder / "absent", nobody, os.R_OK)


# --------------------------------------------------------------------------------------------
# Through a node


def settle_all(node: Node, probes: tuple[str, ...], *options: str) -> None:
    """Run the adapter (`--once`) until every probe is settled (one run may lease fewer)."""
    for _ in range(len(probes)):
        outcomes = run_adapter(node, "python", *options)
        assert all(o["seq"] is not None for o in outcomes)
        if all(state(node, p).get("status") is not None for p in probes):
            return
    raise AssertionError(f"unsettled: {[state(node, p) for p in probes]}")


def test_an_adapter_process_settles_4_gb_as_memory_exceeded_and_goes_on(node: Node) -> None:
    probe(node, "limit-4gb", "python", {"code": ALLOCATE_4_GB, "timeout_ms": 60_000}, {})
    probe(node, "limit-after", "python", {"code": "result = 'still here'"}, {})
    settle_all(node, ("limit-4gb", "limit-after"))
    failed = state(node, "limit-4gb")
    assert failed["status"] == "error", failed
    assert failed["result"]["code"] == "python.memory_exceeded"
    assert state(node, "limit-after")["result"] == "still here"


@pytest.mark.parametrize("way", ["option", "limit", "file"])
def test_an_adapter_process_settles_a_busy_loop_as_cpu_exceeded(
    node: Node, way: str, tmp_path: Path
) -> None:
    """The limit holds however it was set (cli/limit_options.py)."""
    settings = tmp_path / "adapter.toml"
    settings.write_text("[limits]\ncpu_s_max = 1\n")
    options = {
        "option": ("--cpu-s-max", "1"),
        "limit": ("--limit", "cpu_s_max=1"),
        "file": ("--limits-file", str(settings)),
    }[way]
    name = f"limit-spin-{way}"
    probe(node, name, "python", {"code": SPIN, "timeout_ms": 120_000}, {})
    settle_all(node, (name,), *options)
    failed = state(node, name)
    assert failed["status"] == "error" and failed["result"]["code"] == "python.cpu_exceeded"
