"""Side products that share the package: the ``call`` client, ``inspect`` and the demo server."""
