"""cuDF and RMM: the device memory pool every device buffer comes from, and the ``gpu-cudf`` reader path.

``device`` (is a device usable, the capped pool), ``path`` (the reader path: ``screen`` → ``source``
→ ``read`` → host assembly, ``rows`` for the rows it leaves). Only this package imports cuDF.
"""
