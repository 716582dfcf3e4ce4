"""Stream processing (faust-streaming workers): validate, redact, windows, analysis, recovery.

Pure logic lives in ``validate``, ``windows``, ``analysis/`` and ``recovery/``; ``stages/`` hosts
it on faust and ``app`` wires the stages. Reads only ``schemas`` contracts (and ``redaction``);
never imports ``collectors`` or ``sinks``.
"""
