"""The service's routes, one router per audience: :mod:`.analyst` (the ``/api/v1`` data
routes an analyst's key opens, and the public ones), :mod:`.admin` (``/api/v1/admin``,
the admin key) and :mod:`.page` (the analysts' page, ``/docs`` and their files)."""
