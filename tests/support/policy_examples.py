"""The policy examples in examples/policies/, with what each expects (shared by the policy tests)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainstack import yamlio

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "policies"


@dataclass(frozen=True)
class Example:
    file: str
    obj: dict
    expect: str  # allowed | denied
    message: str

    @property
    def id(self) -> str:
        return f"{self.file}:{self.obj['kind']}/{self.obj['metadata']['name']}"


def examples() -> list[Example]:
    found = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for obj in yamlio.load_all(path.read_text()):
            annotations = obj["metadata"].get("annotations", {})
            found.append(Example(path.name, obj, annotations["trainstack.io/expect"],
                                 annotations.get("trainstack.io/message", "")))
    return found
