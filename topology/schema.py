"""The topology language's shape, checked by pydantic: names, types, units, allowed keys."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from topology.units import parse_bandwidth, parse_duration_ms

__all__ = ["NAME_PATTERN", "Cluster", "Datacenter", "Link", "Mirror", "MirrorMode", "Name", "Naming", "Patterns",
           "TopicSpec", "TopologySpec", "check_name"]

#: What a topology, datacenter, cluster or mirror may be called. These names become directory
#: and file names in the launcher's state dir (data dirs, logs, mirror configs) and parts of
#: WAN proxy names in a URL path: one path component each, never `..` or a separator, never a
#: leading dot or dash, short enough for any file system.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_name(name: str) -> str:
    """`name` if it is a valid name (NAME_PATTERN); raises ValueError saying what a name is."""
    if not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"{name[:60]!r} is not a valid name: up to 100 letters, digits, '.', '_' and '-', "
                         f"starting with a letter or digit (it names directories and files in the state dir)")
    return name


Name = Annotated[str, AfterValidator(check_name)]

DurationMs = Annotated[int, BeforeValidator(parse_duration_ms)]
BytesPerSecond = Annotated[int, BeforeValidator(parse_bandwidth)]
ConfigValue = str | int | float | bool


def _config_text(value: ConfigValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Datacenter(_Strict):
    description: str = ""


class TopicSpec(_Strict):
    partitions: int = Field(1, ge=1, le=100_000)
    replication_factor: int | None = Field(None, ge=1)
    configs: dict[str, ConfigValue] = Field(default_factory=dict)

    def config_texts(self) -> dict[str, str]:
        return {k: _config_text(v) for k, v in self.configs.items()}


def _topic(value: object) -> object:
    # `orders: 3` is short for `orders: {partitions: 3}`; `orders:` alone means one partition.
    if value is None:
        return {}
    if isinstance(value, int) and not isinstance(value, bool):
        return {"partitions": value}
    return value


class Cluster(_Strict):
    datacenter: str
    brokers: int = Field(1, ge=1, le=64)
    coordination: Literal["standalone", "zookeeper"] = "standalone"
    role: Literal["local", "aggregate"] = "local"
    port: int | None = Field(None, ge=1, le=65535, description="bootstrap port; allocated when absent")
    topics: dict[str, Annotated[TopicSpec, BeforeValidator(_topic)]] = Field(default_factory=dict)
    configs: dict[str, ConfigValue] = Field(default_factory=dict)

    def config_texts(self) -> dict[str, str]:
        return {k: _config_text(v) for k, v in self.configs.items()}


class Link(_Strict):
    between: list[str] = Field(min_length=2, max_length=2)
    latency: DurationMs = 0
    jitter: DurationMs = 0
    bandwidth: BytesPerSecond | None = None


class Patterns(_Strict):
    include: list[str] = Field(default_factory=lambda: [".*"])
    exclude: list[str] = Field(default_factory=list)

    @field_validator("include", "exclude")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
        return patterns

    def matches(self, name: str, always_excluded: tuple[str, ...] = ()) -> bool:
        """Whether `name` matches an include pattern and neither an exclude pattern nor one of
        `always_excluded` (e.g. internal topics)."""
        if any(re.fullmatch(p, name) for p in (*self.exclude, *always_excluded)):
            return False
        return any(re.fullmatch(p, name) for p in self.include)


#: A mirror's two modes (MirrorMaker 2's copy, or link mode's read-only mirror topics), in a
#: topology and in the mirror's own config file alike.
MirrorMode = Literal["mm2", "link"]
#: MirrorMaker 2's naming of remote topics: `<source alias>.<topic>`, or the source's name.
Naming = Literal["default", "identity"]


class Mirror(_Strict):
    source: str
    target: str
    topics: Patterns = Field(default_factory=Patterns)
    groups: Patterns = Field(default_factory=Patterns)
    mode: MirrorMode = "mm2"
    # MirrorMaker 2's naming; a link-mode mirror always keeps names (its mirror topics carry the
    # source's offsets under the source's name), so `naming: default` given with it is refused.
    naming: Naming = "default"

    @property
    def keeps_names(self) -> bool:
        """Whether remote topics keep their source names: identity naming, or link mode."""
        return self.mode == "link" or self.naming == "identity"

    @property
    def effective_naming(self) -> str:
        """The naming the mirror applies: `identity` for a link-mode mirror whatever the file says."""
        return "identity" if self.keeps_names else "default"

    def remote_name(self, topic: str) -> str:
        """The topic's name at the target: MirrorMaker 2's `<source alias>.<topic>` or the same."""
        return topic if self.keeps_names else f"{self.source}.{topic}"


def _datacenter(value: object) -> object:
    return {} if value is None else value  # `east:` with nothing under it is a datacenter too


class TopologySpec(_Strict):
    name: Name | None = None
    datacenters: dict[Name, Annotated[Datacenter, BeforeValidator(_datacenter)]] = Field(min_length=1)
    clusters: dict[Name, Cluster] = Field(min_length=1)
    links: list[Link] = Field(default_factory=list)
    mirrors: dict[Name, Mirror] = Field(default_factory=dict)
