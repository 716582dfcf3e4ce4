"""Stream processing (faust-streaming workers): validate, windows; later detect and attribute.

Reads only ``schemas`` contracts; never imports ``collectors`` or ``sinks``.
"""
