"""The bounds of flow definitions (what a definition may be) and the execution limits a
definition may set for its executions (spec/11-flows.md §7), with their ceilings.

Every bound is a named constant with its unit last; crossing one is a typed error (`flow.limit`
or `flow.too_large`), tested at the edge.
"""

from __future__ import annotations

from dataclasses import dataclass

KIB = 1024
MIB = 1024 * KIB

DEFINITION_BYTES_MAX = 1 * MIB
"""Authored text and canonical CBOR alike: the CAS blob a deploy stores is bounded too."""
DEPTH_MAX = 64
"""Nesting of maps and lists, the document's root counting 1 (the kernel's CBOR bound)."""
VALUE_NODES_MAX = 1_000_000
"""Values in a parsed document. YAML aliases share nodes, so without this bound a small
file could expand into an exponential walk (a "billion laughs")."""
TEXT_LENGTH_MAX = 64 * KIB
"""Characters of any one string (map keys included)."""
STEPS_MAX = 1000
TASKS_PER_STEP_MAX = 1000
"""Tasks of one step, the tasks of nested lists (call branches, branch cases, repeat) included."""
TASK_NESTING_MAX = 16
"""Task lists inside task lists: a step's own list is 1."""
ARCS_PER_STEP_MAX = 1000
RULES_PER_TASK_MAX = 100
SUBFLOWS_MAX = 1000
KEYCHAIN_ENTRIES_MAX = 256

NAME_LENGTH_MAX = 128
"""Flow, step, signal, subflow alias and iterator names (their patterns say so too)."""
TASK_NAME_LENGTH_MAX = 256
"""Longer than other names: an unnamed nested task's generated name carries its scope."""
PATH_LENGTH_MAX = 256
DURATION_MS_MAX = 10**12
"""About 31.7 years: a duration in nanoseconds stays inside a signed 64-bit integer."""
ATTEMPTS_MAX = 1000


@dataclass(frozen=True)
class DefinitionLimits:
    """The bounds `load_definition` and `decode_definition` enforce. Callers may lower them
    (tests do, to reach the edges cheaply); raising them past the defaults is allowed but the
    kernel's CBOR nesting bound (64) still applies to the canonical form."""

    definition_bytes_max: int = DEFINITION_BYTES_MAX
    depth_max: int = DEPTH_MAX
    value_nodes_max: int = VALUE_NODES_MAX
    text_length_max: int = TEXT_LENGTH_MAX
    steps_max: int = STEPS_MAX
    tasks_per_step_max: int = TASKS_PER_STEP_MAX
    task_nesting_max: int = TASK_NESTING_MAX
    arcs_per_step_max: int = ARCS_PER_STEP_MAX
    rules_per_task_max: int = RULES_PER_TASK_MAX
    subflows_max: int = SUBFLOWS_MAX
    keychain_entries_max: int = KEYCHAIN_ENTRIES_MAX


# Execution limits (the CFD's `limits`): default and the most a definition may ask for.
EXECUTION_LIMITS: dict[str, tuple[int, int]] = {
    "tokens_max": (10_000, 1_000_000),
    "loop_items_max": (10_000, 1_000_000),
    "in_flight_max": (100, 10_000),
    "iter_depth_max": (8, 16),
    "history_events_per_step_max": (1_000, 100_000),
    "tasks_per_input_max": (100_000, 10_000_000),
    "result_inline_bytes_max": (64 * KIB, 1 * MIB),
    "signals_buffered_max": (100, 1_000),
}
"""name -> (default, ceiling); every limit is at least 1. `iter_depth_max` (levels of
`iter.parent`) has a low ceiling: each level nests the execution's state one map deeper, under
the kernel's CBOR nesting bound (64). `signals_buffered_max` too: each buffered signal keeps up
to ~260 bytes in the state (its name, its sequence, a payload or its reference), and 1,000 of
them stay well inside a step's 1 MiB output."""
LIMITS_WRITTEN_WHEN_SET = ("signals_buffered_max",)
"""Execution limits added after definitions were deployed: the canonical form names one only
when it is not its default, so a definition deployed before keeps its bytes and its hash
(and still reads back as the canonical form of itself)."""
