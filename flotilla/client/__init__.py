"""A typed Python client for Flotilla's HTTP API.

::

    from flotilla.client import Client, NotFound

    with Client("http://127.0.0.1:8080", token="alice-secret") as flotilla:
        submission = flotilla.submit_file("examples/jobs/sleep.yaml")
        for event in flotilla.watch("A", "sleep"):
            print(event.job_id, event.kind)

:class:`Client` blocks; :class:`AsyncClient` has the same methods as coroutines (``watch`` is an async
iterator). Error answers raise :class:`ApiError` subclasses by status (401 :class:`Unauthorized`, 403
:class:`Forbidden`, 404 :class:`NotFound`, 409 :class:`Conflict`, 413 :class:`PayloadTooLarge`, 422
:class:`Invalid`, 5xx :class:`ServerError`), each carrying the API's error body as :class:`ErrorBody`.
"""

from flotilla.client._async import AsyncClient
from flotilla.client._requests import DEFAULT_URL, client_config_path, read_job_file, resolve
from flotilla.client._sync import Client
from flotilla.client.errors import (ApiError, BadRequest, Conflict, ConnectionFailed, ErrorBody, ErrorItem,
                                    FlotillaError, Forbidden, Invalid, NotFound, PayloadTooLarge, ServerError,
                                    Unauthorized)
from flotilla.client.models import (Cancellation, Event, Job, PendingJob, Queue, QueueDeletion, QueuePending, Submission,
                                    SubmittedJob)

__all__ = ["ApiError", "AsyncClient", "BadRequest", "Cancellation", "Client", "Conflict", "ConnectionFailed",
           "DEFAULT_URL", "ErrorBody", "ErrorItem", "Event", "FlotillaError", "Forbidden", "Invalid", "Job",
           "NotFound", "PayloadTooLarge", "PendingJob", "Queue", "QueueDeletion", "QueuePending", "ServerError",
           "Submission", "SubmittedJob",
           "Unauthorized", "client_config_path", "read_job_file", "resolve"]
