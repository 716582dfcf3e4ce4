"""The stream worker's stages, one module each, wired together by ``rankscope.streams.app``.

``validate`` (+ redaction) reads the raw topics and writes events; ``windows`` hosts the events
agent, which hands each parsed event to ``analysis`` and to the progress notes of ``recovery``,
the host of the fleet's one recovery decider. ``shared`` holds the counters and topics they all
use; the app's one-second timer ticks recovery, windows and analysis, in that order.
"""
