"""``/docs``: Swagger UI served by the service itself, from the ``fastapi-offline`` wheel's files.

FastAPI's own ``/docs`` loads Swagger UI from a CDN and starts it with an
inline script; here every file comes from this server (``/docs/static/``
from the wheel, ``/ui/static/docs.js`` from this package), so the page works
without the internet and under the Content-Security-Policy of
:mod:`flotilla.service.ui.protect`, which allows no inline script.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

SWAGGER_FILES = Path(fastapi_offline.__file__).resolve().parent / "static"

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title} API</title>
<link rel="stylesheet" href="/docs/static/swagger-ui.css">
<link rel="icon" type="image/png" href="/docs/static/favicon.png">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/docs/static/swagger-ui-bundle.js"></script>
<script src="/ui/static/docs.js"></script>
</body>
</html>
"""


def mount_docs(app, title: str = "Flotilla") -> None:
    """Serve ``/docs`` and its files on ``app`` (which must have ``docs_url=None``)."""

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return HTMLResponse(PAGE.format(title=title))

    app.mount("/docs/static", StaticFiles(directory=SWAGGER_FILES), name="docs-static")


__all__ = ["mount_docs", "SWAGGER_FILES"]
