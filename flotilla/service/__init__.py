"""The Flotilla service: a durable job store, the submission API, job events, leases and ``flotilla serve``.

Modules:

* :mod:`~flotilla.service.settings` - what the service reads from the config, as plain values;
* :mod:`~flotilla.service.schema` / :mod:`~flotilla.service.store` - SQLAlchemy Core tables,
  versioned migrations, and every transaction the service runs (a package, one module per thing it keeps);
* :mod:`~flotilla.service.leases` - the lease rules: what clusters' reports do to the jobs they hold;
* :mod:`~flotilla.service.jobspec` - the job file (Armada's jobspec) and validation at submission;
* :mod:`~flotilla.service.auth` - bearer tokens and per-queue permissions;
* :mod:`~flotilla.service.api` - the FastAPI application (a package, one router per resource);
* :mod:`~flotilla.service.loop` - the scheduling loop (leases, events, hand-over to clusters);
* :mod:`~flotilla.service.server` - ``flotilla serve``: API and loop in one process;
* :mod:`~flotilla.service.cli` - the commands, which talk to the API through :mod:`flotilla.client`.

Internal: not part of the plugin API (:mod:`flotilla.plugin`, :mod:`flotilla.testing`); may change in any release.
"""
