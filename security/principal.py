"""From a client certificate's distinguished name to a principal, by Kafka's
``ssl.principal.mapping.rules``.

The rules are a comma-separated list, tried in order; the first that matches the whole name gives
the principal's name (``User:`` and it):

- ``RULE:<regex>/<replacement>/`` rewrites the name with the regex (Java's syntax for the parts
  used here; ``$1`` in the replacement is the first group), optionally followed by ``L`` or ``U``
  to lower- or upper-case the result;
- ``DEFAULT`` is the name as it is.

A name no rule matches cannot be mapped: the connection is refused, as Kafka refuses it. The
rules' syntax is checked when the listener starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["PrincipalMapper", "PrincipalRulesError", "parse_principal_rules"]


class PrincipalRulesError(ValueError):
    """Rules that do not parse; the message says which and why."""


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str
    case: str  # "", "L" or "U"

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        mapped = self.pattern.sub(self.replacement, name, count=1)
        return mapped.lower() if self.case == "L" else mapped.upper() if self.case == "U" else mapped


# One rule: DEFAULT, or RULE:pattern/replacement/ with an optional L or U. A pattern may contain
# commas and escaped slashes; the list is split where a rule ends, not at every comma.
_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:[^/\\]|\\.)*)/((?:[^/\\]|\\.)*)/([LU])?)\s*(?:,|$)")


def _java_replacement(text: str) -> str:
    # Java's $1 (and \$ for a dollar) to Python's \g<1>; a backslash escapes the next character.
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            escaped = text[i + 1]  # taken literally (\$ is a dollar sign)
            out.append("\\\\" if escaped == "\\" else escaped)
            i += 2
        elif char == "$" and i + 1 < len(text) and text[i + 1].isdigit():
            j = i + 1
            while j < len(text) and text[j].isdigit():
                j += 1
            out.append(f"\\g<{text[i + 1:j]}>")
            i = j
        else:
            out.append(char.replace("\\", "\\\\"))
            i += 1
    return "".join(out)


def parse_principal_rules(text: str) -> PrincipalMapper:
    """Raises PrincipalRulesError naming the rule that does not parse."""
    rules: list[_Rule] = []
    position = 0
    text = text.strip()
    while position < len(text):
        match = _RULE.match(text, position)
        if match is None or match.end() == position:
            raise PrincipalRulesError(f"cannot read a rule at {text[position:position + 40]!r}: expected DEFAULT "
                                      "or RULE:pattern/replacement/[LU]")
        default, pattern, replacement, case = match.groups()
        if default:
            rules.append(_Rule(None, "", ""))
        else:
            try:
                compiled = re.compile(pattern.replace("\\/", "/"))
            except re.error as exc:
                raise PrincipalRulesError(f"RULE:{pattern}/: not a regular expression: {exc}") from None
            rules.append(_Rule(compiled, _java_replacement(replacement.replace("\\/", "/")), case or ""))
        position = match.end()
    if not rules:
        raise PrincipalRulesError("no rule given (DEFAULT keeps the distinguished name)")
    return PrincipalMapper(tuple(rules))


@dataclass(frozen=True)
class PrincipalMapper:
    rules: tuple[_Rule, ...]

    def name_of(self, distinguished_name: str) -> str | None:
        """The principal's name for `distinguished_name`, or None when no rule applies."""
        for rule in self.rules:
            mapped = rule.apply(distinguished_name)
            if mapped is not None:
                return mapped
        return None
