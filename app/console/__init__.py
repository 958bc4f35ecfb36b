"""The operator console: outer rooms around the core that read what it records.

Metrics (:mod:`.metrics`), request ids and logs (:mod:`.requests`, :mod:`.logs`),
readable stop sentences (:mod:`.sentences`), the stop webhook (:mod:`.webhook`),
the dashboard's static files (``ui/``), offline API docs (:mod:`.docs`) and the
embedded default's admin token file (:mod:`.admin_token`). None of them decides
anything about admission; the core calls them with one-line hooks.
"""
