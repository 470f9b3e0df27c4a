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
    column: int | None = None  # 1-based, where the YAML text itself is at fault
    excerpt: str = ""  # the offending line with a caret under the column (YAML syntax errors)

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        if self.line and self.column:
            where += f":{self.column}"
        field = f" {self.path}:" if self.path else ""
        text = f"{where}:{field} {self.message}"
        return f"{text}\n{self.excerpt}" if self.excerpt else text

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class SpecError(ValueError):
    """One or more invalid documents; ``issues`` lists every problem found, in file order."""

    def __init__(self, issues: list[SpecIssue]):
        self.issues = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))
