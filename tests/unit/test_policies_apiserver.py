"""The policies on a real API server (the local control plane): the examples' verdicts hold,
denied requests carry the rule's message, and the environment decides deny versus warn."""

from __future__ import annotations

from support.policy_examples import examples


def test_every_rule_has_an_allowed_and_a_denied_example():
    from trainstack import paths

    rules = {p.stem for p in paths.policies_dir().glob("*.yaml")}
    files = {}
    for example in examples():
        files.setdefault(example.file.removesuffix(".yaml"), set()).add(example.expect)
    for rule in rules:
        assert files.get(rule) == {"allowed", "denied"}, rule
