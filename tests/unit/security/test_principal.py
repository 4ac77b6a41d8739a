"""security.principal: Kafka's ssl.principal.mapping.rules, with the examples Kafka documents."""

from __future__ import annotations

import pytest

from security.principal import PrincipalRulesError, parse_principal_rules

RULES = ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
         "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
         "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,"
         "DEFAULT")


@pytest.mark.parametrize(
    ("name", "principal"),
    [
        ("CN=kafka-server1,OU=ServiceUsers,O=Org,C=US", "kafka-server1"),
        ("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Palo Alto,ST=CA,C=US", "duke@javasoft"),
        ("OU=JavaSoft,cn=duke.x,O=Sun", "DUKE.X"),
        ("O=NoCommonName", "O=NoCommonName"),
    ],
)
def test_the_first_matching_rule_names_the_principal(name: str, principal: str) -> None:
    assert parse_principal_rules(RULES).name_of(name) == principal


def test_default_keeps_the_name_and_no_match_names_nobody() -> None:
    assert parse_principal_rules("DEFAULT").name_of("CN=alice,O=Example") == "CN=alice,O=Example"
    only_admins = parse_principal_rules("RULE:^CN=(admin-[a-z]+)$/$1/")
    assert only_admins.name_of("CN=admin-ops") == "admin-ops"
    assert only_admins.name_of("CN=alice") is None


def test_slashes_commas_and_dollars_in_rules() -> None:
    mapper = parse_principal_rules(r"RULE:^CN=([^,]*),OU=a\/b$/$1 costs \$5/")
    assert mapper.name_of("CN=x,OU=a/b") == "x costs $5"


@pytest.mark.parametrize("text", ["", "RULE:^CN=(.*)$/$1", "RULE:(unclosed/$1/", "DEFAULTS", "RULE:a/b/X"])
def test_rules_that_do_not_parse_are_refused(text: str) -> None:
    with pytest.raises(PrincipalRulesError):
        parse_principal_rules(text)
