"""Flows: what a declarative flow's step costs on a durable world, against the plain Python
workflow's effect step of `bench_effects`, measured in the same run, rounds interleaved.

The definitions are in `bench/flows/`, deployed to one flow world (`create_flow_world`,
manual clock); the interpreter (`aos/FlowExec@1`) is the flow component, `checked` (a warm
instance; about one step in twenty also re-run fresh). Tool intents are performed in process
by `LocalAdapters.drain()`: the echo tool, a receipt signed with the world's adapter key,
`World.settle`, one `run_to_idle` (one flush) per batch of open intents. An execution is timed
from `ops.start` until `drain()` returns, with the execution completed.

* `inline10`: ten steps of one `assign` or `noop` task each, exclusive arcs in a chain. The
  whole run is one input: `ops.start` journals the start event and `run_to_idle` steps the
  execution once. `extra.module_calls` (interpreter steps the kernel ran: `StepRunner.step`
  calls, counted by wrapping the runner; read rounds and `checked` re-runs are inside one
  call) and `extra.step_records` (step records of the execution's cell in the journal)
  should both be 1.
* `inline10 padded`: the same ten steps and 500 more, reachable only through an exclusive arc
  of the first step that is never taken (so the definition checks pass): a ~40x larger
  definition, the same run. The interpreter reads the definition from the CAS and memoizes
  it by hash, so on a warm instance the per-step cost should not grow with its size (ratio
  ~1x). A fresh instance has no memo: group `flows.definition size, fresh instance` runs the
  same step (the execution's one input, captured from the live run, output compared) on a
  new instance each time, as `checked` does for ~5% of steps and a restarted world for its
  first: that one reads and decodes the whole definition.
* `tool10`: ten steps of one echo `call` each: the start, then ten drain rounds (one receipt
  settled, one flush each). Per tool-call step = execution / 10.
* `loop100` (and `loop25`): one step, a parallel loop over 100 (25) items, one echo call per
  item, all in flight at once: the start, then one drain round (every receipt settled, one
  interpreter step per receipt, one flush).
* Baseline: the effect-chain world (`bench/worlds/effect_chain`) through `bench_effects`' own
  helpers: one cell doing 10 `bench/noop@1` effects one after another, each receipt signed
  and settled in process, one flush per receipt. Per effect = chain / 10. Round i of the
  chain runs right before round i of the flows; `extra.ratio_per_round` is the tool-call step
  over the effect step, round by round.

Everything runs on durable worlds (sync on: one fsync'd commit per flush); the same pair
(chain, tool10) also runs on no-sync worlds, in the same rounds, where the ratio is the CPU
cost alone (a slow fsync adds the same to both sides and flatters the durable ratio). The
no-sync pair is also timed in CPU seconds (group `..., CPU time`: waiting for a core on a
machine shared with other jobs inflates wall time, not CPU time), and the median guest fuel
of one step of each (wasmtime's instruction count: the same on any machine, under any load).

Rows are medians over rounds; a round's sample is the mean of `EXECUTIONS` runs (loops: 1).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import yaml

from aos.flows.define.cfd import encode_definition, load_definition
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.flow_world import EXEC_WORKFLOW, FlowKeys, create_flow_world
from aos.flows.serve.local import LocalAdapters
from aos.kernel.wasm import StepResult, StepRunner
from aos.kernel.world import records
from aos.kernel.world.stamps import PinnedStampSource
from aos.kernel.world.world import CLOCK_MANUAL, World
from bench.bench_effects import WORKFLOW as CHAIN_WORKFLOW
from bench.bench_effects import chain_world as _effect_chain_world
from bench.bench_effects import run_chains
from bench.harness import Row

HERE = Path(__file__).resolve().parent
FLOWS = HERE / "flows"
INLINE = FLOWS / "inline10.flow.yaml"
TOOL = FLOWS / "tool10.flow.yaml"
LOOP = FLOWS / "loop100.flow.yaml"
INLINE_NAME, TOOL_NAME, LOOP_NAME = "bench/inline10", "bench/tool10", "bench/loop100"
PADDED_NAME = "bench/inline10-padded"
CHAIN_STEPS = 10  # steps of inline10 and tool10; effects per chain of the baseline
PAD_STEPS = 500
LOOP_ITEMS = 100
LOOP_ITEMS_SMALL = 25
ROUNDS = {True: 7, False: 15}  # by quick
EXECUTIONS = {True: 3, False: 5}  # runs of each contender per round (the loops: 1)
LOOP_ROUNDS = {True: 2, False: 5}  # the loops run in the first rounds only (loop100: ~7 s)
FRESH_ROUNDS = {True: 5, False: 9}
STEP_RATIO_TARGET = 2.0


# --------------------------------------------------------------------------------------------
# Definitions


def _padded_text() -> str:
    """inline10 with PAD_STEPS more steps in a chain behind an exclusive arc of its first
    step that is never taken: the arc after the unguarded arc to s2, and guarded false."""
    value: dict[str, Any] = yaml.safe_load(INLINE.read_text())
    value["name"] = PADDED_NAME
    first = value["steps"][0]
    first["next"] = {
        "mode": "exclusive",
        "arcs": [{"to": first["next"]}, {"to": "pad1", "when": "{{ false }}"}],
    }
    for n in range(1, PAD_STEPS + 1):
        task = {"do": "assign", "set": {f"pad{n}": n}} if n % 2 else {"do": "noop", "result": n}
        step: dict[str, Any] = {"name": f"pad{n}", "tasks": [task]}
        if n < PAD_STEPS:
            step["next"] = f"pad{n + 1}"
        value["steps"].append(step)
    return yaml.safe_dump(value, sort_keys=False)


# --------------------------------------------------------------------------------------------
# A flow world

Contender = Callable[[], float]


class _Flows:
    """A flow world with the bench's definitions deployed and its interpreter's steps counted."""

    def __init__(self, world: World, keys: FlowKeys) -> None:
        self.world = world
        self.adapters = LocalAdapters(world, keys)
        self.executions = 0
        self.module_calls = 0
        self.running = ""
        # The last interpreter step of each flow: its input and output envelopes.
        self.last_step: dict[str, tuple[bytes, bytes]] = {}
        self.sizes: dict[str, int] = {}
        for text in (INLINE.read_text(), _padded_text(), TOOL.read_text(), LOOP.read_text()):
            definition = load_definition(text)
            self.sizes[definition.name] = len(encode_definition(definition))
            ops.deploy(world, definition)
        # Count the kernel's calls of the interpreter (an instance attribute over the method:
        # one Python call more per step, ~0.1 µs against milliseconds).
        runner = world.runtime.runner(EXEC_WORKFLOW)
        self.module, self.limits = runner.module, runner.limits
        step = runner.step

        self.fuel: dict[str, list[int]] = {}

        def counting(input_bytes: bytes, **kwargs: Any) -> StepResult:
            self.module_calls += 1
            result = step(input_bytes, **kwargs)
            self.last_step[self.running] = (input_bytes, result.output_bytes)
            self.fuel.setdefault(self.running, []).append(result.fuel_used)
            return result

        runner.step = counting

    def execute(self, name: str, workload: Any = None) -> tuple[float, dict[str, int]]:
        """Start an execution of `name` and drain the adapters until nothing is left open; the
        seconds it took and (counted after the timer) its module calls and step records."""
        self.executions += 1
        exec_id = f"x{self.executions}"
        since, calls, self.running = self.world.height, self.module_calls, name
        started = time.perf_counter()
        ops.start(self.world, name, workload=workload, exec_id=exec_id)
        self.adapters.drain()
        elapsed = time.perf_counter() - started
        state = ops.status(self.world, exec_id)
        assert state["status"] == "completed", (exec_id, state["status"], state["engine"])
        counts = {
            "module_calls": self.module_calls - calls,
            "step_records": self._step_records(exec_id, since),
        }
        return elapsed, counts

    def fresh_step(self, name: str) -> Contender:
        """The last interpreter step of `name` again, on a fresh instance each time (as
        `checked` re-runs ~5% of steps, and as the first step after a restart does): the
        instance has no memo, so it asks for the definition and reads it whole."""
        runner = StepRunner(self.module, limits=self.limits, determinism="strict")
        input_bytes, output_bytes = self.last_step[name]

        def one() -> float:
            started = time.perf_counter()
            result = runner.step(input_bytes, seq=0, read_blob=self.world.read_blob)
            elapsed = time.perf_counter() - started
            assert result.output_bytes == output_bytes, f"{name}: a fresh step differed"
            return elapsed

        return one

    def _step_records(self, exec_id: str, since: int) -> int:
        key = self.world.reader.key_bytes(EXEC_WORKFLOW, exec_id)
        return sum(
            1
            for _, record in self.world.store.journal.read(since + 1, self.world.height)
            if isinstance(record, dict)
            and record.get("kind") == records.STEP
            and record["workflow"] == EXEC_WORKFLOW
            and record["key"] == key
        )


@contextmanager
def _flow_world(*, sync: bool) -> Iterator[_Flows]:
    with tempfile.TemporaryDirectory(prefix="aos-bench-flows-") as tmp:
        world, keys = create_flow_world(
            Path(tmp) / "w", clock=CLOCK_MANUAL, sync=sync, stamps=PinnedStampSource()
        )
        with world:
            yield _Flows(world, keys)


# --------------------------------------------------------------------------------------------
# Rounds


class _Counts:
    """Module calls and step records of each contender's executions (the same every time)."""

    def __init__(self) -> None:
        self.seen: dict[str, set[tuple[int, int]]] = {}

    def add(self, name: str, counts: dict[str, int]) -> None:
        self.seen.setdefault(name, set()).add((counts["module_calls"], counts["step_records"]))

    def of(self, name: str) -> dict[str, Any]:
        (calls, steps), *others = sorted(self.seen[name])
        assert not others, f"{name}: the counts changed between executions: {self.seen[name]}"
        return {"module_calls": calls, "step_records": steps}


def _chain_fuel(chain: World) -> list[int]:
    """Guest fuel of every step of the effect chain's workflow, as it runs (wasmtime fuel is
    counted instructions: the one figure here that the machine's load cannot move)."""
    runner = chain.runtime.runner(CHAIN_WORKFLOW)
    step, fuel = runner.step, []

    def fueled(input_bytes: bytes, **kwargs: Any) -> StepResult:
        result = step(input_bytes, **kwargs)
        fuel.append(result.fuel_used)
        return result

    runner.step = fueled
    return fuel


class _Cpu:
    """The CPU time (process time) of a contender's runs, beside their wall time: on a
    machine shared with other jobs, waiting for a core inflates wall time, not this."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = {}

    def timed(self, name: str, run: Contender) -> Contender:
        def one() -> float:
            started = time.process_time()
            elapsed = run()
            self.seconds.setdefault(name, []).append(time.process_time() - started)
            return elapsed

        return one

    def per_round(self, name: str, per_round: int) -> list[float]:
        runs = self.seconds[name]
        return [statistics.fmean(runs[i : i + per_round]) for i in range(0, len(runs), per_round)]


def _contenders(
    flows: _Flows, chain: World, counts: _Counts, prefix: str = ""
) -> dict[str, Contender]:
    chains = iter(range(10**9))

    def effect_chain() -> float:
        return run_chains(chain, [f"c{next(chains)}"], CHAIN_STEPS, flush_each=True)

    def flow(name: str, workload: Any = None, label: str | None = None) -> Contender:
        def one() -> float:
            elapsed, found = flows.execute(name, workload)
            counts.add(prefix + (label or name), found)
            return elapsed

        return one

    return {
        f"{prefix}effect": effect_chain,
        f"{prefix}tool": flow(TOOL_NAME),
        f"{prefix}inline": flow(INLINE_NAME),
        f"{prefix}padded": flow(PADDED_NAME),
        f"{prefix}loop": flow(LOOP_NAME, {"items": list(range(LOOP_ITEMS))}),
        f"{prefix}loop_small": flow(
            LOOP_NAME, {"items": list(range(LOOP_ITEMS_SMALL))}, label="loop_small"
        ),
    }


def _measure(quick: bool) -> tuple[dict[str, list[float]], _Counts, dict[str, Any]]:
    """Seconds per execution, one sample per round for each contender, rounds interleaved:
    round i of every contender (sync on, then the no-sync pair), then round i + 1. Beside
    them, the no-sync pair's CPU seconds (`cpu ...`) and the guest fuel of their steps."""
    counts = _Counts()
    cpu = _Cpu()
    with ExitStack() as stack:
        flows = stack.enter_context(_flow_world(sync=True))
        chain = stack.enter_context(_effect_chain_world(sync=True))
        loose_flows = stack.enter_context(_flow_world(sync=False))
        loose_chain = stack.enter_context(_effect_chain_world(sync=False))
        chain_fuel = _chain_fuel(loose_chain)
        contenders = _contenders(flows, chain, counts)
        loose = _contenders(loose_flows, loose_chain, counts, prefix="nosync ")
        contenders["nosync effect"] = cpu.timed("effect", loose["nosync effect"])
        contenders["nosync tool"] = cpu.timed("tool", loose["nosync tool"])
        loops = {"loop", "loop_small"}
        # Warm-up: instances, compiled templates, the first reads of each definition (loop25
        # warms what loop100 runs: the same definition).
        for name, run in contenders.items():
            for _ in range({"loop": 0, "loop_small": 1}.get(name, 2)):
                run()
        cpu.seconds.clear()
        del chain_fuel[:]
        loose_flows.fuel.clear()
        samples: dict[str, list[float]] = {name: [] for name in contenders}
        for round_ in range(ROUNDS[quick]):
            for name, run in contenders.items():
                if name in loops:
                    if round_ < LOOP_ROUNDS[quick]:
                        samples[name].append(run())
                    continue
                samples[name].append(statistics.fmean(run() for _ in range(EXECUTIONS[quick])))
        # The same step of inline10 and of its padded twin on fresh instances, interleaved.
        fresh = {f"fresh {n}": flows.fresh_step(n) for n in (INLINE_NAME, PADDED_NAME)}
        for name, run in fresh.items():
            run()
            samples[name] = []
        for _ in range(FRESH_ROUNDS[quick]):
            for name, run in fresh.items():
                samples[name].append(run())
        for name in ("effect", "tool"):
            samples[f"cpu {name}"] = cpu.per_round(name, EXECUTIONS[quick])
        facts: dict[str, Any] = dict(flows.sizes)
        facts["fuel effect"] = statistics.median(chain_fuel)
        facts["fuel tool"] = statistics.median(loose_flows.fuel[TOOL_NAME])
    return samples, counts, facts


def _row(
    group: str,
    name: str,
    samples: list[float],
    per: str,
    *,
    divide: int = 1,
    baseline: bool = False,
    **extra: Any,
) -> Row:
    scaled = [s / divide for s in samples]
    return Row(group, name, statistics.median(scaled), per, len(scaled), baseline, scaled, extra)


def _per_round(numerator: list[float], denominator: list[float]) -> dict[str, Any]:
    ratios = [a / b for a, b in zip(numerator, denominator, strict=True)]
    return {
        "ratio_per_round": [float(f"{x:.4g}") for x in ratios],
        "ratio_median": float(f"{statistics.median(ratios):.4g}"),
    }


def run(quick: bool) -> list[Row]:
    s, counts, sizes = _measure(quick)
    rows: list[Row] = []
    n, items, small_items = CHAIN_STEPS, LOOP_ITEMS, LOOP_ITEMS_SMALL
    effect = f"python workflow effect step (effect_chain, {n} effects, in-process noop adapter)"
    tool = f"flow tool-call step (tool10: {n} echo calls in a chain, LocalAdapters)"
    for prefix, sync in (("", "sync on"), ("nosync ", "sync off")):
        group = f"flows.step vs python effect step, {sync}"
        rows += [
            _row(group, effect, s[f"{prefix}effect"], "effect", divide=n, baseline=True),
            _row(
                group,
                tool,
                s[f"{prefix}tool"],
                "tool-call step",
                divide=n,
                target_ratio_max=STEP_RATIO_TARGET,
                **_per_round(s[f"{prefix}tool"], s[f"{prefix}effect"]),
                **counts.of(f"{prefix}{TOOL_NAME}"),
            ),
        ]
        if prefix:
            continue
        rows += [
            _row(
                group,
                f"flow parallel loop item (loop100: {items} echo calls, 1 drain round)",
                s["loop"],
                "item",
                divide=items,
                **counts.of(LOOP_NAME),
            ),
            _row(
                group,
                f"flow parallel loop item (loop25: {small_items} echo calls, 1 drain round)",
                s["loop_small"],
                "item",
                divide=small_items,
                **counts.of("loop_small"),
            ),
            _row(
                group,
                f"flow inline step (inline10: {n} assign/noop steps, 1 input)",
                s["inline"],
                "inline step",
                divide=n,
                **counts.of(INLINE_NAME),
            ),
        ]
    inline, tool10, loop = counts.of(INLINE_NAME), counts.of(TOOL_NAME), counts.of(LOOP_NAME)
    group = "flows.execution, sync on"
    rows += [
        _row(
            group,
            f"inline10: {n} inline steps ({inline['module_calls']} module call, "
            f"{inline['step_records']} step record)",
            s["inline"],
            "execution",
            baseline=True,
            **inline,
        ),
        _row(
            group,
            f"tool10: {n} echo calls ({tool10['module_calls']} module calls)",
            s["tool"],
            "execution",
            **tool10,
        ),
        _row(
            group,
            f"loop100: {items} parallel echo calls ({loop['module_calls']} module calls)",
            s["loop"],
            "execution",
            **loop,
        ),
    ]
    group = "flows.definition size, sync on"
    small, padded = sizes[INLINE_NAME], sizes[PADDED_NAME]
    rows += [
        _row(
            group,
            f"inline10, {n}-step definition ({small:,} B canonical CBOR)",
            s["inline"],
            "execution",
            baseline=True,
            definition_bytes=small,
            **inline,
        ),
        _row(
            group,
            f"inline10, {n + PAD_STEPS}-step definition ({padded:,} B; {PAD_STEPS} steps not taken)",
            s["padded"],
            "execution",
            definition_bytes=padded,
            mean_s=statistics.fmean(s["padded"]),
            mean_s_small=statistics.fmean(s["inline"]),
            **_per_round(s["padded"], s["inline"]),
            **counts.of(PADDED_NAME),
        ),
    ]
    group = "flows.definition size, fresh instance"
    rows += [
        _row(
            group,
            f"inline10's step on a fresh instance (reads the definition), {n}-step definition",
            s[f"fresh {INLINE_NAME}"],
            "step",
            baseline=True,
            definition_bytes=small,
        ),
        _row(
            group,
            f"inline10's step on a fresh instance (reads the definition), {n + PAD_STEPS}-step "
            "definition",
            s[f"fresh {PADDED_NAME}"],
            "step",
            definition_bytes=padded,
            **_per_round(s[f"fresh {PADDED_NAME}"], s[f"fresh {INLINE_NAME}"]),
        ),
    ]
    return rows + _cpu_rows(s, sizes)


def _cpu_rows(s: dict[str, list[float]], facts: dict[str, Any]) -> list[Row]:
    """The no-sync pair again in CPU seconds, with the guest fuel of one step of each: the
    figures to trust when other jobs share the machine."""
    n = CHAIN_STEPS
    group = "flows.step vs python effect step, sync off, CPU time"
    fuel_effect, fuel_tool = facts["fuel effect"], facts["fuel tool"]
    return [
        _row(
            group,
            f"python workflow effect step (effect_chain; guest fuel {fuel_effect:,.0f} a step)",
            s["cpu effect"],
            "effect",
            divide=n,
            baseline=True,
            guest_fuel_per_step=fuel_effect,
        ),
        _row(
            group,
            f"flow tool-call step (tool10; guest fuel {fuel_tool:,.0f} a step, "
            f"{fuel_tool / fuel_effect:.2f}x)",
            s["cpu tool"],
            "tool-call step",
            divide=n,
            target_ratio_max=STEP_RATIO_TARGET,
            guest_fuel_per_step=fuel_tool,
            guest_fuel_ratio=float(f"{fuel_tool / fuel_effect:.4g}"),
            **_per_round(s["cpu tool"], s["cpu effect"]),
        ),
    ]
