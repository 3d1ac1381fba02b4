"""The console in front of a secured cluster, in a real headless Chromium: a SASL_PLAINTEXT
listener with PLAIN users, StandardAuthorizer, `allow.everyone.if.no.acl.found=false` and
`admin` a super user. Users log in to the console as users of the cluster (a wrong password
shows SASL_AUTHENTICATION_FAILED and reaches no log), see only what their ACLs allow, and the
ACLs and quotas pages change the broker's state (checked with the admin client); logging out
ends the server-side session; read-only mode allows logging in but no change.

One broker, one console process and one browser for the module (CI time); the read-only
console and the session store run in this process, on the same broker."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
from aiohttp.test_utils import TestClient, TestServer
from console_process import CHROMIUM, ConsoleProcess

from odradek.cli import web_console
from odradek.client import Admin, ClientQuotaEntity, ClientQuotaFilter, NewTopic
from odradek.clock import ManualClock
from odradek.console.app import make_app
from odradek.console.auth import COOKIE, SessionStore
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
)
from tests.security.test_acl_matrix import USERS, start_acl_broker

VISIBLE = "alice-visible"  # alice may describe it
HIDDEN = "no-acl-topic"  # no ACL at all: hidden from everyone but super users
WRONG_PASSWORD = "not-alices-password-42"

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason=f"{CHROMIUM} is missing: install Debian's chromium (`make chromium`) to run the "
           "console's browser tests")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    broker = start_acl_broker(tmp_path_factory.mktemp("console-acl-broker"),
                              allow_everyone=False)
    try:
        yield broker
    finally:
        broker.process.stop()


@pytest.fixture(scope="module")
def admin(broker):
    with Admin(broker.client_config("admin")) as admin:
        admin.create_topics([NewTopic(VISIBLE, 1, 1), NewTopic(HIDDEN, 1, 1)])
        admin.create_acls([AclBinding(ResourceType.TOPIC, VISIBLE, PatternType.LITERAL,
                                      "User:alice", "*", AclOperation.DESCRIBE,
                                      PermissionType.ALLOW)])
        yield admin


@pytest.fixture(scope="module")
def console(broker, admin, tmp_path_factory):
    process = ConsoleProcess(tmp_path_factory.mktemp("console-sasl"), broker.sasl_bootstrap,
                             "--sasl-mechanism", "PLAIN")
    yield process
    process.stop()


def log_in(page, url: str, user: str, password: str | None = None, path: str = "/topics"):
    page.goto(url + path)
    page.wait_for_url("**/login?next=**")
    page.fill("#username", user)
    page.fill("#password", USERS[user] if password is None else password)
    page.click("#login")


def alice_read_acls(admin) -> list[AclBinding]:
    return admin.describe_acls(AclBindingFilter(
        ResourceType.TOPIC, HIDDEN, PatternType.LITERAL, "User:alice", None, AclOperation.ANY,
        PermissionType.ANY))


def test_wrong_password_shows_kafkas_error_and_logs_no_password(console, page, shots):
    log_in(page, console.url, "alice", WRONG_PASSWORD)
    assert page.locator("input[name=next]").input_value() == "/topics"
    page.wait_for_selector("#login-error")
    assert page.locator("#login-error").inner_text().startswith("SASL_AUTHENTICATION_FAILED")
    assert page.locator("#username").input_value() == "alice"
    assert page.context.cookies() == []  # no session
    shots(page, "login-failed")
    log = console.out.read_text()
    assert "console login of 'alice' failed: SASL_AUTHENTICATION_FAILED" in log
    assert WRONG_PASSWORD not in log


def test_a_user_sees_what_its_acls_allow_and_logs_out(console, page, shots):
    log_in(page, console.url, "alice")
    page.wait_for_url("**/topics")  # where the login page was asked for
    assert page.locator("#console-user").inner_text() == "alice"
    table = page.locator("#topics").inner_text()
    assert VISIBLE in table and HIDDEN not in table
    shots(page, "topics-as-alice")
    response = page.goto(console.url + "/acls")  # DescribeAcls needs DESCRIBE on the cluster
    assert response.status == 403
    assert page.locator("#error-message").inner_text().startswith(
        "CLUSTER_AUTHORIZATION_FAILED")
    [cookie] = [c for c in page.context.cookies() if c["name"] == COOKIE]
    assert cookie["httpOnly"] and USERS["alice"] not in cookie["value"]

    page.click("#logout")
    page.wait_for_url("**/login")
    assert page.context.cookies() == []
    page.context.add_cookies([cookie])  # the old session id no longer opens anything
    page.goto(console.url + "/topics")
    page.wait_for_url("**/login?next=**")
    assert USERS["alice"] not in console.out.read_text()


def test_add_and_delete_an_acl(console, page, admin, shots):
    log_in(page, console.url, "admin")
    page.wait_for_url("**/topics")
    assert HIDDEN in page.locator("#topics").inner_text()  # a super user sees every topic
    page.click("nav a:text-is('ACLs')")
    page.wait_for_url("**/acls")
    page.click("#add-acl")
    page.fill("#principal", "User:alice")
    page.select_option("#operation", "READ")
    page.select_option("#resource_type", "TOPIC")
    page.fill("#resource_name", HIDDEN)
    shots(page, "acl-new")
    page.click("#review")
    assert page.locator("#review-resource").inner_text() == f"TOPIC {HIDDEN} (LITERAL)"
    assert alice_read_acls(admin) == []  # the review step changes nothing
    shots(page, "acl-review")
    page.click("#confirm-acl")
    page.wait_for_url("**/acls?*created=1")
    expected = AclBinding(ResourceType.TOPIC, HIDDEN, PatternType.LITERAL, "User:alice", "*",
                          AclOperation.READ, PermissionType.ALLOW)
    assert alice_read_acls(admin) == [expected]
    rows = page.locator("#acls tr", has_text=HIDDEN)
    assert rows.count() == 1 and "READ" in rows.inner_text()
    shots(page, "acls")

    rows.locator("a.delete-acl").click()
    page.wait_for_url("**/acls/delete?*")
    assert page.locator("#review-operation").inner_text() == "READ"
    assert alice_read_acls(admin) == [expected]  # not before the confirmation
    shots(page, "acl-delete-confirm")
    page.click("#confirm-acl")
    page.wait_for_url("**/acls?deleted=1")
    assert alice_read_acls(admin) == []


def test_set_and_remove_a_quota(console, page, admin, shots):
    alice = ClientQuotaEntity.of({"user": "alice"})
    log_in(page, console.url, "admin", path="/quotas")
    page.wait_for_url("**/quotas")
    page.fill("#user", "alice")
    page.select_option("#key", "producer_byte_rate")
    page.fill("#value", "1024")
    page.click("#review-quota")
    assert page.locator("#review-entity").inner_text() == "user 'alice'"
    assert alice not in admin.describe_client_quotas(ClientQuotaFilter.all())
    shots(page, "quota-review")
    page.click("#confirm-quota")
    page.wait_for_url("**/quotas?changed=1")
    assert admin.describe_client_quotas(ClientQuotaFilter.all())[alice] == {
        "producer_byte_rate": 1024.0}
    row = page.locator("#quotas tr", has_text="producer_byte_rate")
    assert "user 'alice'" in row.inner_text()
    shots(page, "quotas")

    row.locator("a.remove-quota").click()
    page.click("#confirm-quota")
    page.wait_for_url("**/quotas?changed=1")
    assert alice not in admin.describe_client_quotas(ClientQuotaFilter.all())


def sasl_config(broker) -> dict[str, str]:
    return {"bootstrap.servers": broker.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN"}


def run_in_thread(coroutine) -> None:
    """In a thread of its own: this thread's event loop is the sync Playwright's."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, coroutine).result(120)


def test_read_only_allows_login_but_no_change(broker, admin):
    """A read-only console (served in this process, on a real socket) lets users log in and out
    and refuses every change."""
    async def scenario() -> None:
        app = make_app(sasl_config(broker), read_only=True)
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            response = await client.post("/login", data={
                "username": "admin", "password": USERS["admin"], "next": "/acls"},
                allow_redirects=False)
            assert response.status == 303 and response.headers["Location"] == "/acls"
            response = await client.get("/acls")
            page = await response.text()
            assert response.status == 200 and 'id="read-only"' in page
            assert 'id="add-acl"' not in page
            response = await client.post("/acls/new", data={
                "principal": "User:alice", "operation": "READ", "resource_type": "TOPIC",
                "resource_name": HIDDEN, "confirmed": "yes"})
            assert response.status == 403 and "read-only" in await response.text()
            response = await client.post("/quotas/set", data={
                "user": "alice", "key": "producer_byte_rate", "value": "1", "confirmed": "yes"})
            assert response.status == 403
            response = await client.post("/logout", allow_redirects=False)
            assert response.status == 303
            response = await client.get("/acls", allow_redirects=False)
            assert response.status == 303 and response.headers["Location"].startswith("/login")

    run_in_thread(scenario())
    assert alice_read_acls(admin) == []
    assert ClientQuotaEntity.of({"user": "alice"}) not in admin.describe_client_quotas()


def test_sessions_expire_when_idle(broker, admin):
    """The session store with an injected clock: the user's own admin client is opened at
    login, kept while used, and closed once idle for the timeout."""
    clock = ManualClock()
    store = SessionStore(sasl_config(broker), timeout_s=60, clock=clock)

    async def scenario() -> None:
        with pytest.raises(KafkaError) as failure:
            await store.login("alice", WRONG_PASSWORD)
        assert failure.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert store.sessions == {}
        session = await store.login("alice", USERS["alice"])
        try:
            assert [t.name for t in await session.service.topics()] == [VISIBLE]
            clock.advance(59_000)
            assert await store.get(session.session_id) is session  # used: idle time restarts
            clock.advance(59_000)
            assert await store.get(session.session_id) is session
            clock.advance(60_000)
            assert await store.get(session.session_id) is None
            assert store.sessions == {}
        finally:
            await store.close()

    run_in_thread(scenario())


def test_login_needs_a_password_mechanism(capsys):
    assert web_console.main(["--bootstrap-server", "127.0.0.1:1",
                             "--sasl-mechanism", "GSSAPI"]) == 1
    assert "not sasl.mechanism GSSAPI" in capsys.readouterr().err
