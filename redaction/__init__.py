"""Redaction: reviewable rules (``rules.yaml``) loaded into Presidio, and the fail-closed stage
that every event passes before any derived topic or table.

Data flow inside: ``rules`` (the contract) -> ``engine`` (Presidio analyzer and anonymizer,
pre-filter, keyed hash) -> ``stage`` (field policy, cache, quarantine, audit counts). ``review``
and ``report`` measure the rules on the labelled corpus for security reviewers.
"""
