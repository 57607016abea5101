"""An execution's number (spec/12 §6): the positive 63-bit integer NoETL's execution ids
are, derived from the aos execution id, so that a playbook writing `{{ execution_id }}` into
SQL or a BIGINT column runs as it does on NoETL. The interpreter computes the same number
(`modules/flow/aos_flow/run.py`, `execution_number`; a test holds the two equal): the 64-bit FNV-1a
hash of the id's UTF-8 bytes, mixed by splitmix64's finalizer, its top bit cleared (0 is
read as 1)."""

from __future__ import annotations

_MASK64 = 2**64 - 1
_NUMBER_MASK = 2**63 - 1
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MIX_1 = 0xBF58476D1CE4E5B9
_MIX_2 = 0x94D049BB133111EB


def execution_number(exec_id: str) -> int:
    """The number of the execution `exec_id` (1 .. 2**63 - 1)."""
    value = _FNV_OFFSET
    for byte in exec_id.encode("utf-8"):
        value = ((value ^ byte) * _FNV_PRIME) & _MASK64
    value = ((value ^ (value >> 30)) * _MIX_1) & _MASK64
    value = ((value ^ (value >> 27)) * _MIX_2) & _MASK64
    value ^= value >> 31
    return (value & _NUMBER_MASK) or 1
