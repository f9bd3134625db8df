"""An in-process service built from a config text, for the auth-reload and stream tests."""

from flotilla.config import load_config
from flotilla.scheduler import Scheduler
from flotilla.service.loop import service_backends
from flotilla.service.server import build_service


ALICE = "    - {token: alice-token, user: alice}\n"


def _service(tmp_path, text: str):
    path = tmp_path / "serve.yaml"
    path.write_text(text)
    cfg = load_config(path)
    service = build_service(cfg, Scheduler(cfg), store_url=f"sqlite:///{tmp_path}/r.db",
                            backends=service_backends(cfg), seed=0, config_path=str(path))
    return service, path
