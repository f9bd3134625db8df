"""The web dashboard at ``/ui``: queues, jobs, a job's page, cancel and reprioritize.

Why Jinja2 templates and plain HTML forms (no NiceGUI, no JS framework):
every page is rendered on the server from the same store queries the API
uses, so lists are sorted and paged by the database (a page of 50 in a
queue of 100,000 jobs: 10-150 ms, ``bench/ui.py``); there is nothing to
fetch at run time (one CSS file ships in the package, in ``static/``); and
the pages work in any browser, a text one included. NiceGUI would add a
websocket per open page and a large bundle.

Authentication: with ``auth.tokens`` or ``auth.oidc`` set, the login page
asks for a token (a static one or an OIDC token) and keeps it in an
HttpOnly, SameSite=Strict cookie; every page and button acts as that user,
with the API's rules: queues are listed for everyone, a queue's jobs only
to those who may act in it (a job of another queue is "not found", as in
the API), and cancel/reprioritize are refused with 403 otherwise. Without
either (a local, single-user service) there is no login.

Protections (:mod:`.protect`): security headers on every response, forms
accepted from the dashboard's own pages only (same-origin ``Origin``, or the
session's form token), notices from a fixed set.
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import unquote_to_bytes, urlencode

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, PackageLoader, select_autoescape

from flotilla.core.quantities import format_quantity
from flotilla.service import access
from flotilla.service.auth import Authenticator, Identity, may_act
from flotilla.service.bounds import (INT64_MAX, INTEGER_TEXT, BoundsError, id_problem, priority_from_text, shown_text,
                                     text_problem)
from flotilla.service.errors import ApiError
from flotilla.service.guard import LOGIN_COOKIE, MAX_FORM_FIELDS
from flotilla.service.roles.status import StatusReader, reason_codes
from flotilla.service.settings import ServiceSettings
from flotilla.service.store import ACTIVE, NONTERMINAL, QUEUED, STATES, Store
from flotilla.service.ui.protect import FORM_FIELD, CSRF_COOKIE, form_refusal, form_token, notice, \
    session_cookie
from flotilla.service.ui.queries import PAGE_SIZE, SORTS, JobFilter, job_events, job_page, job_sets

COOKIE = LOGIN_COOKIE
STATIC = Path(__file__).resolve().parent / "static"


def _environment() -> Environment:
    env = Environment(loader=PackageLoader("flotilla.service.ui", "templates"),
                      autoescape=select_autoescape(["html"]))
    env.filters["when"] = lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) if t else ""
    env.filters["pct"] = lambda x: f"{100 * (x or 0):.1f}%"
    env.filters["quantity"] = lambda amount, resource: format_quantity(amount, resource)
    return env


def tree_order(rows: list[dict]) -> list[dict]:
    """Queues depth first under their parents (by name among siblings), each with its ``depth``."""
    children: dict[str | None, list[dict]] = {}
    names = {row["name"] for row in rows}
    for row in rows:
        parent = row.get("parent") if row.get("parent") in names else None
        children.setdefault(parent, []).append(row)
    out: list[dict] = []

    def walk(parent: str | None, depth: int) -> None:
        for row in sorted(children.get(parent, ()), key=lambda r: r["name"]):
            out.append({**row, "depth": depth})
            walk(row["name"], depth + 1)

    walk(None, 0)
    return out


#: The last page number a job list takes: its offset stays a 64-bit integer in either database.
MAX_PAGE = INT64_MAX // PAGE_SIZE


async def form_fields(request: Request) -> dict[str, str] | ApiError:
    """A URL-encoded form's fields, each name and value percent-decoded as strict UTF-8 text without NUL.

    Starlette's parser turns bytes that are not UTF-8 into U+FFFD, so a form
    would store changed text where the API refuses it; this refuses it
    (the :class:`ApiError` is returned, to be raised where pages render).
    A form of more than :data:`MAX_FORM_FIELDS` fields is refused (413)
    before any is decoded. The body is already read and within
    ``guard.MAX_FORM_BYTES``, by a logged-in user (the :class:`Guard`).
    """
    body = await request.body()
    if body.count(b"&") >= MAX_FORM_FIELDS:
        return ApiError(413, f"a form of more than {MAX_FORM_FIELDS} fields")
    fields: dict[str, str] = {}
    for pair in body.split(b"&") if body else ():
        name, _, value = pair.partition(b"=")
        try:
            name_text, value_text = (unquote_to_bytes(part.replace(b"+", b" ")).decode("utf-8")
                                     for part in (name, value))
        except UnicodeDecodeError:
            return ApiError(422, "a form field is not valid UTF-8 once percent-decoded")
        for text in (name_text, value_text):
            if (why := text_problem(text)) is not None:
                return ApiError(422, f"{shown_text(name_text)}: {why}", field=shown_text(name_text))
        fields.setdefault(name_text, value_text)
    return fields


def form_priority(fields: dict[str, str]) -> int:
    """The form's ``priority``, within the API's bounds and refused with the API's message (422)."""
    if "priority" not in fields:
        raise ApiError(422, "priority: Field required", field="priority")
    try:
        return priority_from_text(fields["priority"])
    except BoundsError as exc:
        raise ApiError(exc.status, exc.message, field=exc.field) from None


def mount_ui(app, store: Store, settings: ServiceSettings, status: StatusReader,
             authenticator: Authenticator | None = None) -> None:
    """Add ``/ui`` (pages) and ``/ui/static`` (the stylesheet) to ``app``."""
    auth = authenticator or Authenticator.from_settings(settings)
    env = _environment()
    router = APIRouter(prefix="/ui", include_in_schema=False)
    open_access = settings.open_access

    def who(request: Request) -> Identity | None:
        if open_access:
            return Identity("anonymous", frozenset(), admin=True)
        token = request.cookies.get(COOKIE)
        return auth.authenticate(f"Bearer {token}") if token else None

    def login_of(request: Request, identity: Identity | None) -> str | None:
        """The login cookie a form token is bound to (none without tokens, or before logging in)."""
        return request.cookies.get(COOKIE) if identity is not None and not open_access else None

    def page(template: str, request: Request, identity: Identity | None, status_code: int = 200, **values):
        session, new = session_cookie(request.cookies)
        csrf = form_token(session, identity.user if identity is not None else "", login_of(request, identity))
        html = env.get_template(template).render(request=request, user=identity, open_access=open_access,
                                                 csrf=csrf, csrf_field=FORM_FIELD, **values)
        response = HTMLResponse(html, status_code=status_code)
        if new:
            response.set_cookie(CSRF_COOKIE, session, httponly=True, samesite="strict", path="/ui")
        return response

    async def form_refused(request: Request, identity: Identity | None) -> tuple[object, dict[str, str]]:
        """(the error page for a form that is malformed or not sent from this dashboard's pages, or None;
        the form's fields)."""
        fields = await form_fields(request)
        if isinstance(fields, ApiError):
            return page("error.html", request, identity, fields.status, message=fields.detail,
                        status=fields.status), {}
        why = form_refusal(request.headers.get("origin"), request.headers.get("host"), fields.get(FORM_FIELD),
                           request.cookies.get(CSRF_COOKIE), identity.user if identity is not None else "",
                           login_of(request, identity))
        return (None if why is None else page("error.html", request, identity, 403, message=why, status=403)), \
            fields

    def login_redirect(request: Request) -> RedirectResponse:
        return RedirectResponse(f"/ui/login?{urlencode({'next': str(request.url.path)})}", status_code=303)

    def queue_or_refuse(name: str, identity: Identity, act: bool = True):
        if (why := id_problem(name)) is not None:   # as the API's path parameters: matched whole, 422
            raise ApiError(422, f"queue: {why}", field="queue")
        return access.queue_for(store, name, identity, act)

    def visible_job(job_id: str, identity: Identity) -> dict:
        if (why := id_problem(job_id)) is not None or len(job_id) > 32:
            raise ApiError(422, f"job_id: {why or 'a job id has at most 32 characters'}", field="job_id")
        return access.visible_job(store, job_id, identity)

    async def guarded(request: Request, render, form: bool = False):
        """``render(identity)`` in a thread (a form's route: ``render(identity, fields)``), or the login or error
        page."""
        identity = await run_in_threadpool(who, request)   # an OIDC token may need the provider's keys fetched
        if identity is None:
            return login_redirect(request)
        args: tuple = (identity,)
        if form:
            refused, fields = await form_refused(request, identity)
            if refused is not None:
                return refused
            args = (identity, fields)
        try:
            return await run_in_threadpool(render, *args)
        except ApiError as exc:
            return page("error.html", request, identity, exc.status, message=exc.detail, status=exc.status)

    # -- login -------------------------------------------------------------------------
    @router.get("/login")
    def login_form(request: Request, next: str = "/ui"):
        return page("login.html", request, None, next=next if next.startswith("/ui") else "/ui", error=None)

    @router.post("/login")
    async def login(request: Request):
        refused, fields = await form_refused(request, None)
        if refused is not None:
            return refused
        token, next = fields.get("token", ""), fields.get("next", "/ui")
        target = next if next.startswith("/ui") else "/ui"
        if await run_in_threadpool(auth.authenticate, f"Bearer {token.strip()}") is None:
            return page("login.html", request, None, 401, next=target, error="unknown token")
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(COOKIE, token.strip(), httponly=True, samesite="strict", path="/ui")
        return response

    @router.post("/logout")
    async def logout(request: Request):
        identity = await run_in_threadpool(who, request)
        refused, _ = await form_refused(request, identity)
        if refused is not None:
            return refused
        response = RedirectResponse("/ui/login", status_code=303)
        response.delete_cookie(COOKIE, path="/ui")
        return response

    # -- pages -------------------------------------------------------------------------
    @router.get("")
    async def queues_page(request: Request):
        def render(identity):
            body = status.get()
            shares = body.get("queues", {})
            rows = []
            for queue in store.list_queues():
                counts = store.queue_counts(queue.name)
                q = shares.get(queue.name, {})
                rows.append({"name": queue.name, "weight": queue.weight, "fair": q.get("fairShare"),
                             "share": q.get("share"), "queued": counts[QUEUED], "parent": q.get("parent"),
                             "running": sum(counts[s] for s in ACTIVE), "mine": may_act(identity, queue)})
            known = {row["name"] for row in rows}
            for name, q in shares.items():     # inner queues of a tree hold no jobs of their own
                if name not in known:
                    rows.append({"name": name, "weight": q["weight"], "fair": q["fairShare"], "share": q["share"],
                                 "queued": None, "running": None, "parent": q.get("parent"), "mine": False})
            rows = tree_order(rows)
            return page("queues.html", request, identity, queues=rows, cycle=body.get("cycle"),
                        cycle_time=body.get("time"), clusters=body.get("clusters", {}),
                        plugins=body.get("plugins") or {})
        return await guarded(request, render)

    @router.get("/queues/{name}")
    async def queue_page(request: Request, name: str):
        def render(identity):
            queue = queue_or_refuse(name, identity, act=False)
            counts = store.queue_counts(name)
            mine = may_act(identity, queue)
            body = status.get()
            # A reason's text can quote the queue's job specs (a nodeSelector's value): only those who may act
            # in the queue read it; others see how many jobs wait in each category.
            per_reason = body.get("reasons", {}).get(name, {})
            return page("queue.html", request, identity, queue=queue, counts=counts, states=STATES, mine=mine,
                        job_sets=job_sets(store, name) if mine else [], share=body.get("queues", {}).get(name, {}),
                        reasons=per_reason if mine else reason_codes(body, name))
        return await guarded(request, render)

    @router.get("/jobs")
    async def jobs_page(request: Request, queue: str, jobSet: str = "", state: str = "", owner: str = "",
                        sort: str = "submitted", order: str = "desc", page_number: str = "1"):
        def render(identity):
            queue_or_refuse(queue, identity)
            number = int(page_number) if INTEGER_TEXT.fullmatch(page_number) and len(page_number) <= 19 else 0
            if sort not in SORTS or order not in ("asc", "desc") or (state and state not in STATES) \
                    or not 1 <= number <= MAX_PAGE:
                raise ApiError(422, f"sort must be one of {', '.join(SORTS)}, order asc or desc, state one of "
                                    f"{', '.join(STATES)}, page_number from 1 to {MAX_PAGE}")
            filt = JobFilter(queue, jobSet or None, state or None, owner or None)
            total, rows = job_page(store, filt, sort, order == "desc", number)
            params = {"queue": queue, "jobSet": jobSet, "state": state, "owner": owner, "sort": sort, "order": order}
            return page("jobs.html", request, identity, filt=filt, total=total, rows=rows, states=STATES,
                        sort=sort, order=order, page_number=number, pages=max(1, -(-total // PAGE_SIZE)),
                        sorts=list(SORTS), query=lambda **kw: urlencode({**params, **kw}))
        return await guarded(request, render)

    @router.get("/jobs/{job_id}")
    async def job_page_(request: Request, job_id: str):
        def render(identity):
            job = visible_job(job_id, identity)
            waiting = None
            if job["state"] == QUEUED:
                waiting = status.get().get("jobReasons", {}).get(job_id) or "not examined in the last cycle"
            return page("job.html", request, identity, job=job, events=job_events(store, job_id), waiting=waiting,
                        can_stop=job["state"] in NONTERMINAL, message=notice(request.query_params.get("done"), job))
        return await guarded(request, render)

    @router.post("/jobs/{job_id}/cancel")
    async def cancel(request: Request, job_id: str):
        def act(identity, fields):
            job = visible_job(job_id, identity)
            queue_or_refuse(job["queue"], identity)
            store.cancel(job["queue"], None, [job_id], None, by=identity.user)
            return RedirectResponse(f"/ui/jobs/{job_id}?done=cancel", status_code=303)
        return await guarded(request, act, form=True)

    @router.post("/jobs/{job_id}/reprioritize")
    async def reprioritize(request: Request, job_id: str):
        def act(identity, fields):
            job = visible_job(job_id, identity)
            queue_or_refuse(job["queue"], identity)
            priority = form_priority(fields)
            store.reprioritize(job["queue"], priority, None, [job_id], by=identity.user)
            return RedirectResponse(f"/ui/jobs/{job_id}?done=priority", status_code=303)
        return await guarded(request, act, form=True)

    app.include_router(router)
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="ui-static")
