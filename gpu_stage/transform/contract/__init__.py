"""The transform's contract: ``semantics.md`` (the rules) and the reference backend that executes them.

``extract`` (the envelope and first choice), ``content`` (the JSON in ``message.content`` and the
content schema), ``created`` (to epoch milliseconds) and ``meta`` (headers and record columns) are
the reference's parts; every other implementation is checked against its bytes.
"""
