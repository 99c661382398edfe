"""Kubernetes resource quantities ('2', '500m', '1.5Gi', '1e3'): the one parser (apimachinery's
resource.ParseQuantity grammar), for CEL's quantity(), the smoke's CPU rules and the tests.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation

SUFFIXES = {"": Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": Decimal("1e3"),
            "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18"),
            "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
            "Pi": Decimal(2**50), "Ei": Decimal(2**60)}
PATTERN = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?$")
# what a quantity looks like, for the message of a value that is not one
EXAMPLES = "a number with an optional suffix, e.g. 8, 500m, 1.5Gi, 1e3"


def not_a_quantity(text: str) -> str:
    """The one message for TEXT that is not a quantity (what validate and the smoke say)."""
    return f"{json.dumps(text)} is not a Kubernetes quantity ({EXAMPLES})"


class QuantityError(ValueError):
    """TEXT is not a Kubernetes quantity."""


_parsed: dict[str, Decimal] = {}


def parse(value: object) -> Decimal:
    """VALUE (a string, or a number as YAML gives `cpu: 2`) as an exact Decimal."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise QuantityError(f"quantities must be strings or numbers: {value!r}")
    text = str(value)
    found = _parsed.get(text)
    if found is not None:
        return found
    match = PATTERN.match(text)
    if not match:
        raise QuantityError(not_a_quantity(text))
    number, suffix = match.group(1), match.group(2) or ""
    try:
        parsed = Decimal(number) * (SUFFIXES[suffix] if suffix in SUFFIXES else Decimal(10) ** int(suffix[1:]))
    except (InvalidOperation, ValueError) as err:
        raise QuantityError(f"invalid quantity {text!r}") from err
    if len(_parsed) < 50_000:  # validate at scale: bounded, like the other caches
        _parsed[text] = parsed
    return parsed
