"""The operator console: outer rooms above the core that read what it records.

Metrics (:mod:`.metrics`), logs (:mod:`.logs`), the stop webhook (:mod:`.webhook`), the
dashboard's static files (``ui/``), offline API docs (:mod:`.docs`) and the embedded
default's admin token file (:mod:`.admin_token`). None of them decides anything about
admission. The core never imports the console: the console subscribes to the core's
events (:mod:`app.events`) at start-up (:mod:`.listeners`, :func:`.install.install`).
"""
