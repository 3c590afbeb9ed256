"""Routes: the change stream into other destinations besides the lake (docs/routes.md).

``change.py`` is the contract between a route and its sink; ``select.py`` a route's filters
and transforms; ``runner.py`` its durable consumer; ``sinks/`` one module per destination.
"""
