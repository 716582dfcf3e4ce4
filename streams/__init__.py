"""Stream processing (faust-streaming workers): validate, window, and later detect/attribute/recover.

Reads only ``schemas`` contracts; never imports ``collectors`` or ``sinks``.
"""
