"""Ingress stamps and their deterministic derivation.

An input from outside is stamped once, at ingress, with the only non-deterministic facts the
world ever sees: wall time and fresh entropy. The stamp is journaled with the input. Everything
the kernel derives from that input (events emitted by workflows, the contexts they are stepped
with, intent identities) gets a stamp computed from the parent's by pure functions, so replay
reproduces it exactly.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, TypedDict

import blake3 as _blake3

from aos.kernel.errors import KernelInvariantError

ENTROPY_BYTES = 64
_DERIVE_CONTEXT = "aos 2026 stamp derivation v1"


class StampValue(TypedDict):
    """A stamp as records carry it (`Stamp.to_value`), its keys in canonical order."""

    height: int
    entropy: bytes
    wall_ns: int
    manifest: str
    logical_ns: int


@dataclass(frozen=True, slots=True)
class Stamp:
    """When and with what entropy an input entered the world.

    `wall_ns` is the host clock at ingress (informational: nothing steps on it);
    `logical_ns` is the world's logical time, which workflows read as `now_ns`;
    `height` is the journal height the input was admitted at;
    `manifest` is the hash of the manifest in force.
    """

    wall_ns: int
    logical_ns: int
    entropy: bytes
    height: int
    manifest: str

    def __post_init__(self) -> None:
        if len(self.entropy) != ENTROPY_BYTES:
            raise KernelInvariantError(f"stamp entropy must be {ENTROPY_BYTES} bytes")

    def to_value(self) -> StampValue:
        """The stamp as records carry it, its keys in canonical order (spec/01 §3), so a
        record around it is encoded without reordering (`records.IngressEvent.encode`)."""
        return StampValue(
            height=self.height,
            entropy=self.entropy,
            wall_ns=self.wall_ns,
            manifest=self.manifest,
            logical_ns=self.logical_ns,
        )

    @staticmethod
    def from_value(value: Any) -> Stamp:
        return Stamp(
            wall_ns=value["wall_ns"],
            logical_ns=value["logical_ns"],
            entropy=value["entropy"],
            height=value["height"],
            manifest=value["manifest"],
        )

    def derive(self, index: int) -> Stamp:
        """The stamp of the `index`-th thing derived from this one (same times, same
        manifest; entropy from a keyed hash of the parent's)."""
        return Stamp(
            wall_ns=self.wall_ns,
            logical_ns=self.logical_ns,
            entropy=derive_entropy(self.entropy, index),
            height=self.height,
            manifest=self.manifest,
        )


def derive_entropy(parent: bytes, index: int) -> bytes:
    """64 bytes from BLAKE3 in key-derivation mode over the parent entropy and the index."""
    if index < 0:
        raise KernelInvariantError("derivation index must be non-negative")
    hasher = _blake3.blake3(derive_key_context=_DERIVE_CONTEXT)
    hasher.update(parent)
    hasher.update(index.to_bytes(8, "big"))
    return hasher.digest(length=ENTROPY_BYTES)


class StampSource:
    """Where fresh stamps come from. The only place in the kernel that reads a clock or a
    random source, and it runs at ingress, never while stepping. Tests pin it."""

    def wall_ns(self) -> int:
        return time.time_ns()

    def entropy(self) -> bytes:
        return os.urandom(ENTROPY_BYTES)


class PinnedStampSource(StampSource):
    """A deterministic source for tests and reproducible runs: a fixed start time advanced by
    a fixed step, and entropy derived from a seed and a counter."""

    def __init__(self, *, seed: bytes = b"aos-pinned", start_ns: int = 0, step_ns: int = 1) -> None:
        self._seed = _blake3.blake3(seed).digest(length=ENTROPY_BYTES)
        self._next_ns = start_ns
        self._step_ns = step_ns
        self._count = 0

    def wall_ns(self) -> int:
        now = self._next_ns
        self._next_ns += self._step_ns
        return now

    def entropy(self) -> bytes:
        self._count += 1
        return derive_entropy(self._seed, self._count)
