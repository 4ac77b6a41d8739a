"""How a config key's text becomes a typed, bounded value: the one mechanism behind the broker's
configs (broker/config.py, ``server.properties``) and a log's topic configs
(broker/storage/config.py).

A config is a :class:`ConfigModel`: each field names its key once, as its alias (Kafka's name),
with Kafka's default, and with a :class:`Parse` in its annotation saying how the key's text is
read and bounded (:func:`integer`, :func:`choice`, :func:`boolean`, :func:`cleanup_policy`). The
two families word a refused value each in their own way, because their readers differ: an
operator starting a broker reads ``num.partitions: 0 is outside [1, 2147483647]``; a client whose
CreateTopics is refused reads Kafka's INVALID_CONFIG text ``Invalid value 13 for configuration
segment.bytes: must be at least 14``. A :class:`Wording` holds one family's phrasing.

Beside broker/address.py rather than in broker/storage: the broker's config (above storage) and
the log's config (in storage) both use it. It needs nothing but pydantic, so the tools that read
a broker's config do not load the codec.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationInfo, field_validator

__all__ = ["INT_MAX", "LONG_MAX", "ConfigModel", "Parse", "Wording", "boolean", "choice", "cleanup_policy", "integer"]

INT_MAX = 2**31 - 1  # Kafka's INT
LONG_MAX = 2**63 - 1  # Kafka's LONG

CLEANUP_POLICIES = ("delete", "compact")


@dataclass(frozen=True, slots=True)
class Wording:
    """How one family of configs refuses a value: `refuse(key, text, reason)` builds the exception
    from a reason, which is one of the templates below formatted with ``text`` (the value as
    given), ``number``, ``low``, ``high`` and ``choices`` (comma-separated)."""

    refuse: Callable[[str, str, str], Exception]
    not_integer: str
    out_of_range: str
    not_choice: str
    not_boolean: str
    not_cleanup_policy: str


class Parse:
    """Annotation metadata: how a key's text (or a default or value given in code) becomes a field.

    ``as_text``: the field holds a structure built from the text (listeners, directories), and
    DescribeConfigs reports the text as given rather than a rendering of the structure.
    """

    def __init__(self, parse: Callable[[str, str], Any], *, as_text: bool = False) -> None:
        self.parse = parse
        self.as_text = as_text

    def __call__(self, key: str, value: object) -> Any:
        if value is None or not isinstance(value, str | int):
            return value  # unset (None) or already built
        if isinstance(value, bool):  # a default such as True: checked as its Kafka text "true"
            value = "true" if value else "false"
        return self.parse(key, str(value))


class ConfigModel(BaseModel):
    """A pydantic model whose fields are parsed by the `Parse` in their annotation, named in errors
    by their Kafka key (the field's alias, else its validation alias, else its name)."""

    @field_validator("*", mode="before")
    @classmethod
    def _parse(cls, value: object, info: ValidationInfo) -> Any:
        name = info.field_name or ""
        field = cls.model_fields[name]
        for meta in field.metadata:
            if isinstance(meta, Parse):
                alias = field.alias or field.validation_alias
                return meta(alias if isinstance(alias, str) else name, value)
        return value


def integer(wording: Wording, low: int, high: int = LONG_MAX) -> Callable[[str, str], int]:
    """An integer in [low, high] (Kafka's LONG's range unless `high` is given)."""

    def parse(key: str, text: str) -> int:
        try:
            number = int(text.strip())
        except ValueError:
            raise wording.refuse(key, text, wording.not_integer.format(text=text)) from None
        if not low <= number <= high:
            raise wording.refuse(key, text, wording.out_of_range.format(number=number, low=low, high=high))
        return number

    return parse


def choice(wording: Wording, *choices: str) -> Callable[[str, str], str]:
    """One of `choices`, exactly (Kafka's enumerated strings are case-sensitive)."""

    def parse(key: str, text: str) -> str:
        value = text.strip()
        if value not in choices:
            raise wording.refuse(key, text, wording.not_choice.format(text=text, choices=", ".join(choices)))
        return value

    return parse


def boolean(wording: Wording) -> Callable[[str, str], bool]:
    """``true`` or ``false``, in any case, as Kafka's BOOLEAN."""

    def parse(key: str, text: str) -> bool:
        lowered = text.strip().lower()
        if lowered not in ("true", "false"):
            raise wording.refuse(key, text, wording.not_boolean.format(text=text))
        return lowered == "true"

    return parse


def cleanup_policy(wording: Wording, *, sort: bool = False) -> Callable[[str, str], str]:
    """``delete``, ``compact`` or both, comma-separated; blanks dropped. `sort`: in a canonical
    order (a log acts on which policies are on, not their order); else as given, as a broker's
    DescribeConfigs reports it."""

    def parse(key: str, text: str) -> str:
        parts = [p.strip() for p in text.split(",") if p.strip()]
        if not parts or any(p not in CLEANUP_POLICIES for p in parts):
            raise wording.refuse(key, text, wording.not_cleanup_policy.format(text=text))
        return ",".join(sorted(parts) if sort else parts)

    return parse
