"""The user's own rules (``[[rules]]`` in the config): a condition on a run's metrics that
raises a ``user_rule`` incident when it holds for some steps.

May import the contracts (incidents, config) and :mod:`streamwatch.engine.findings`; the
grammar and the rule's config model import only the standard library, pydantic and the
incident contract (the config reads them). :mod:`~streamwatch.rules.testing` runs rules
through the engine and sits above it; the engine imports only the evaluation.

- :mod:`~streamwatch.rules.grammar`: the condition language: tokenizer, parser, terms
- :mod:`~streamwatch.rules.config`: one ``[[rules]]`` entry, validated at start-up
- :mod:`~streamwatch.rules.evaluate`: a run's rule state: windows of the metrics the rules
  read, consecutive steps held, findings
- :mod:`~streamwatch.rules.testing`: ``streamwatch test-rules``: rules against short series
"""
