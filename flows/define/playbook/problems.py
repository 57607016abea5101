"""Collecting a playbook's problems: each with the path into the playbook as written
(`$.workflow[2].tool[0].kind`), what is wrong, and a one-line fix."""

from __future__ import annotations

from dataclasses import dataclass, field

from aos.flows.errors import Problem, json_path

Parts = tuple[str | int, ...]


@dataclass
class Problems:
    """Every problem found so far, in the order found."""

    found: list[Problem] = field(default_factory=list)

    def add(self, code: str, parts: Parts, message: str, fix: str) -> None:
        self.found.append(Problem(code, json_path(parts), f"{message}; fix: {fix}"))

    def __bool__(self) -> bool:
        return bool(self.found)
