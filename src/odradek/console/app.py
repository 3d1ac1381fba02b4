"""The console's aiohttp application: routes, read-only mode and error pages.

Names (topics, groups) travel in query parameters rather than in the path, so any group id
(which may hold '/' or '%') round-trips. Every write is a POST; read-only mode refuses them all
(and the GET pages that only exist to prepare one) with 403 and hides their buttons. Jinja2
autoescapes everything it renders: keys, values, headers and names are data, never markup.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import jinja2
from aiohttp import web

from odradek.cli.consumer_groups import CommandError, parse_datetime_ms
from odradek.console import charts, sampler
from odradek.console.sampler import DEFAULT_SAMPLE_INTERVAL_MS
from odradek.console.service import (
    ENCODINGS,
    MAX_BROWSE_RECORDS,
    ConsoleService,
    GroupActiveError,
)
from odradek.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

SERVICE: web.AppKey[ConsoleService] = web.AppKey("service", ConsoleService)
READ_ONLY: web.AppKey[bool] = web.AppKey("read_only", bool)
TEMPLATES: web.AppKey[jinja2.Environment] = web.AppKey("templates", jinja2.Environment)
#: The request key of the logged-in user's name (`auth`), shown by every page when set.
USER: web.RequestKey[str] = web.RequestKey("console_user", str)

#: Kafka errors that mean "you asked for something that is not there / not allowed now".
_NOT_FOUND = {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.GROUP_ID_NOT_FOUND,
              ErrorCode.UNKNOWN_TOPIC_ID}
_CONFLICT = {ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.NON_EMPTY_GROUP,
             ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
             ErrorCode.REBALANCE_IN_PROGRESS}
_BAD_REQUEST = {ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.INVALID_PARTITIONS,
                ErrorCode.INVALID_REPLICATION_FACTOR, ErrorCode.INVALID_CONFIG,
                ErrorCode.INVALID_REQUEST, ErrorCode.POLICY_VIOLATION}
_DENIED = {ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED,
           ErrorCode.CLUSTER_AUTHORIZATION_FAILED}


def _status_of(error: KafkaError) -> int:
    code = error.code
    if code in _NOT_FOUND:
        return 404
    if code in _CONFLICT:
        return 409
    if code in _BAD_REQUEST:
        return 400
    if code in _DENIED:
        return 403
    return 502  # the cluster failed to answer: the console is a gateway to it


def render(request: web.Request, template: str, status: int = 200, **context: Any
           ) -> web.Response:
    env = request.app[TEMPLATES]
    body = env.get_template(template).render(read_only=request.app[READ_ONLY],
                                             path=request.path,
                                             user=request.get(USER), **context)
    return web.Response(text=body, status=status, content_type="text/html")


def error_page(request: web.Request, status: int, message: str) -> web.Response:
    return render(request, "error.html", status=status, status_code=status, message=message)


class BadParameter(Exception):
    """A malformed query or form parameter: answered with 400 and the reason."""


def int_param(params: Any, name: str, default: int | None = None, *,
              minimum: int | None = None, maximum: int | None = None) -> int | None:
    raw = params.get(name, "")
    if raw == "" or raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadParameter(f"{name} must be an integer, not {raw!r}") from None
    if minimum is not None and value < minimum:
        raise BadParameter(f"{name} must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise BadParameter(f"{name} must be at most {maximum}")
    return value


def str_param(params: Any, name: str) -> str:
    value = params.get(name, "").strip()
    if not value:
        raise BadParameter(f"{name} is required")
    return value


def choice_param(params: Any, name: str, choices: tuple[str, ...], default: str) -> str:
    value = params.get(name, "") or default
    if value not in choices:
        raise BadParameter(f"{name} must be one of {', '.join(choices)}")
    return value


@web.middleware
async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
    """Read-only mode, a same-origin check on writes, and error pages instead of tracebacks."""
    writes = (request.method not in ("GET", "HEAD")
              and not getattr(handler, "not_a_cluster_write", False)) or \
        getattr(handler, "prepares_write", False)
    if writes and request.app[READ_ONLY]:
        return error_page(request, 403, "The console is in read-only mode: no changes.")
    if request.method not in ("GET", "HEAD"):
        # A form posted from another site (CSRF) carries that site's Origin.
        origin = request.headers.get("Origin")
        if origin and origin != "null" and urlsplit(origin).netloc != request.host:
            return error_page(request, 403, "Cross-origin form submission refused.")
    try:
        return await handler(request)
    except BadParameter as exc:
        return error_page(request, 400, str(exc))
    except KafkaError as exc:
        return error_page(request, _status_of(exc), f"{exc.code.name}: {exc.message or ''}")
    except GroupActiveError as exc:
        return error_page(request, 409, str(exc))
    except LookupError as exc:
        return error_page(request, 404, str(exc))
    except web.HTTPException:
        raise
    except Exception:  # a page must not leak a traceback; the log keeps it
        log.exception("console page %s failed", request.path_qs)
        return error_page(request, 500, "Internal error; see the console's log.")


# A write is reviewed before it is made: the review page (topic_new_confirm.html,
# acl_confirm.html, quota_confirm.html; or the GET page of a deletion) posts the same form
# again with this field, which the write's POST handler requires.
CONFIRMED_FIELD = "confirmed"


def review_unless_confirmed(request: web.Request, form: Any, template: str,
                            **context: Any) -> web.Response | None:
    """The review page of a write not yet confirmed; None once the form is confirmed."""
    if form.get(CONFIRMED_FIELD) == "yes":
        return None
    return render(request, template, **context)


def require_confirmed(form: Any, refusal: str) -> None:
    """For writes confirmed on their own GET page (deletions): refuse an unconfirmed POST."""
    if form.get(CONFIRMED_FIELD) != "yes":
        raise BadParameter(refusal)


def prepares_write(handler: Any) -> Any:
    """Marks a GET page that exists only to prepare a write (refused in read-only mode)."""
    handler.prepares_write = True
    return handler


def not_a_cluster_write(handler: Any) -> Any:
    """Marks a POST that changes nothing in the cluster (logging in or out): read-only mode
    allows it."""
    handler.not_a_cluster_write = True
    return handler


# ------------------------------------------------------------------------------ pages

async def overview(request: web.Request) -> web.Response:
    data = await request.app[SERVICE].overview()
    return render(request, "overview.html", overview=data)


async def topics(request: web.Request) -> web.Response:
    query = request.query.get("q", "").strip()
    internal = request.query.get("internal") == "1"
    listed = await request.app[SERVICE].topics(include_internal=internal)
    shown = [t for t in listed if query.lower() in t.name.lower()]
    return render(request, "topics.html", topics=shown, query=query, internal=internal,
                  total=len(listed))


async def topic(request: web.Request) -> web.Response:
    name = str_param(request.query, "name")
    description, partitions = await request.app[SERVICE].topic(name)
    configs = sorted((description.configs or {}).values(), key=lambda c: c.name)
    return render(request, "topic.html", topic=description, partitions=partitions,
                  configs=configs)


@prepares_write
async def new_topic_form(request: web.Request) -> web.Response:
    return render(request, "topic_new.html", form={"name": "", "partitions": 1,
                                                   "replication_factor": 1})


async def new_topic_submit(request: web.Request) -> web.Response:
    form = await request.post()
    name = str_param(form, "name")
    partitions = int_param(form, "partitions", 1, minimum=1, maximum=100_000)
    replication = int_param(form, "replication_factor", 1, minimum=1, maximum=1000)
    review = review_unless_confirmed(request, form, "topic_new_confirm.html", name=name,
                                     partitions=partitions, replication_factor=replication)
    if review is not None:
        return review
    await request.app[SERVICE].create_topic(name, partitions, replication)
    raise web.HTTPSeeOther(f"/topic?name={quote(name, safe='')}&created=1")


@prepares_write
async def delete_topic_form(request: web.Request) -> web.Response:
    name = str_param(request.query, "name")
    return render(request, "topic_delete.html", name=name)


async def delete_topic_submit(request: web.Request) -> web.Response:
    form = await request.post()
    name = str_param(form, "name")
    if form.get("confirm_name") != name:
        raise BadParameter("type the topic's name to confirm its deletion")
    await request.app[SERVICE].delete_topic(name)
    raise web.HTTPSeeOther(f"/topics?deleted={quote(name, safe='')}")


async def messages(request: web.Request) -> web.Response:
    query = request.query
    name = str_param(query, "name")
    partition = int_param(query, "partition", 0, minimum=0)
    offset = int_param(query, "offset", None, minimum=0)
    last = int_param(query, "last", 20, minimum=1, maximum=MAX_BROWSE_RECORDS)
    limit = int_param(query, "limit", 50, minimum=1, maximum=MAX_BROWSE_RECORDS)
    encoding = choice_param(query, "encoding", ENCODINGS, "text")
    from_time = query.get("from_time", "").strip()
    timestamp = None
    if from_time:
        try:
            timestamp = parse_datetime_ms(from_time)
        except CommandError as exc:
            raise BadParameter(f"from_time: {exc}") from None
    assert partition is not None and last is not None and limit is not None
    bounded = offset is not None or timestamp is not None
    records, earliest, latest = await request.app[SERVICE].browse(
        name, partition, offset=offset, last=last, limit=limit if bounded else last,
        encoding=encoding, timestamp=timestamp)
    return render(request, "messages.html", name=name, partition=partition, offset=offset,
                  from_time=from_time,
                  last=last, limit=limit, encoding=encoding, encodings=ENCODINGS,
                  records=records, earliest=earliest, latest=latest)


async def groups(request: web.Request) -> web.Response:
    listed = await request.app[SERVICE].groups()
    return render(request, "groups.html", groups=listed)


async def group(request: web.Request) -> web.Response:
    group_id = str_param(request.query, "id")
    view = await request.app[SERVICE].group(group_id)
    return render(request, "group.html", group=view, group_id=group_id)


RESET_STRATEGIES = ("earliest", "latest", "offset")


async def reset_offsets(request: web.Request) -> web.Response:
    form = await request.post()
    group_id = str_param(form, "id")
    topic_name = form.get("topic", "").strip() or None
    strategy = choice_param(form, "strategy", RESET_STRATEGIES, "earliest")
    offset = int_param(form, "offset", None, minimum=0)
    if strategy == "offset" and offset is None:
        raise BadParameter("offset is required to reset to an offset")
    service = request.app[SERVICE]
    plan = await service.reset_plan(group_id, topic_name, strategy, offset)
    applied = form.get("action") == "apply"
    if applied:
        await service.apply_reset(group_id, plan)
    return render(request, "group_reset.html", group_id=group_id, topic=topic_name or "",
                  strategy=strategy, offset="" if offset is None else offset, plan=plan,
                  applied=applied)


# ------------------------------------------------------------------------------ the app

def templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["q"] = lambda value: quote(str(value), safe="")
    return env


def make_app(client_config: dict[str, Any], *, read_only: bool = False,
             session_timeout_s: float | None = None,
             sample_interval_ms: int = DEFAULT_SAMPLE_INTERVAL_MS,
             metrics_urls: Sequence[str] = ()) -> web.Application:
    # they import this module's helpers: imported once it is loaded
    from odradek.console import acls, auth, live, quotas

    app = web.Application(middlewares=[guard])
    app[READ_ONLY] = read_only
    app[TEMPLATES] = templates()

    async def clients(app: web.Application) -> Any:
        app[SERVICE] = ConsoleService(client_config)
        yield
        await app[SERVICE].close()

    if not auth.setup(app, client_config, SERVICE, session_timeout_s=session_timeout_s):
        app.cleanup_ctx.append(clients)  # else each logged-in user has their own
        # the charts' sampler reads with the console's own clients: none when users log in
        sampler.setup(app, SERVICE, interval_ms=sample_interval_ms, metrics_urls=metrics_urls)
    acls.setup(app)
    quotas.setup(app)
    live.setup(app)
    charts.setup(app, app[TEMPLATES], lambda: app.get(sampler.SAMPLER))
    app.add_routes([
        web.get("/", overview),
        web.get("/topics", topics),
        web.get("/topic", topic),
        web.get("/topics/new", new_topic_form),
        web.post("/topics/new", new_topic_submit),
        web.get("/topic/delete", delete_topic_form),
        web.post("/topic/delete", delete_topic_submit),
        web.get("/topic/messages", messages),
        web.get("/groups", groups),
        web.get("/group", group),
        web.post("/group/reset", reset_offsets),
    ])
    return app
