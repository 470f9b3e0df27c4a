"""Spec errors a user can hit: each names the file, line, field path and what would be valid."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class SpecIssue:
    file: str
    line: int | None
    path: str
    message: str
    document: int = 0  # 0-based index of the YAML document in its file

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        field = f" {self.path}:" if self.path else ""
        return f"{where}:{field} {self.message}"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class SpecError(ValueError):
    """One or more invalid documents; ``issues`` lists every problem found, in file order."""

    def __init__(self, issues: list[SpecIssue]):
        self.issues = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))
