"""One module per query kind: how a validated, paid-for query becomes a release.

Each module's ``release(query, engine, rng)`` makes one engine pass (two for
``bounds="private"``), adds noise through :mod:`dpkit.mechanisms` with
parameters that are functions of public input only, and assembles the
release. Its docstring carries the privacy argument.
"""
