"""The stream worker's stages, one module each, wired together by ``rankscope.streams.app``.

``validate`` (+ redaction) reads the raw topics and writes events; ``windows`` hosts the events
agent and the worker's one-second timer, and hands each parsed event to ``analysis`` and to the
progress notes of ``recovery``, the host of the fleet's one recovery decider. ``shared`` holds
the counters and topics they all use.
"""
