"""`odradek console` against a real broker, driven in a real headless Chromium (Playwright):
every page loads with live data, creating/deleting a topic and resetting a group's offsets
through the UI change the broker's state (checked with the admin client), read-only mode
refuses writes, rendered records cannot inject markup, and bad parameters get a 400.

One broker, one console of each mode and one browser for the whole module (CI time). Each
page's screenshot is saved under the test's tmp dir and copied to build/console-screenshots/
(the browser, page and screenshot fixtures are conftest.py's)."""

from __future__ import annotations

import json
import subprocess

import pytest
from broker_process import ODRADEK, BrokerProcess, wait_until
from console_process import CHROMIUM, ConsoleProcess

from odradek.client import Admin, Consumer, NewTopic, Producer, TopicPartition

TOPIC = "orders"
XSS_TOPIC = "payloads"
XSS = "<script>window.__xss = 1</script><img src=x onerror=\"window.__xss = 2\">"
GROUP = "billing"
LIVE_GROUP = "live"  # a group with an active member
XSS_GROUP = "<b onmouseover=\"window.__xss=3\">grp</b>"
RECORDS = 10  # per partition of TOPIC
COMMITTED = {0: 2, 1: 3}  # GROUP's committed offsets: lag 8 + 7

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason=f"{CHROMIUM} is missing: install Debian's chromium (`make chromium`) to run the "
           "console's browser tests")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("console-broker")).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def admin(broker):
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        yield admin


@pytest.fixture(scope="module")
def seeded(broker, admin):
    """TOPIC: 2 partitions of JSON records with keys and headers; XSS_TOPIC: records whose
    key, value and header are markup; GROUP: committed offsets behind the log end."""
    admin.create_topics([NewTopic(TOPIC, 2, 1), NewTopic(XSS_TOPIC, 1, 1)])
    with Producer({"bootstrap.servers": broker.bootstrap}) as producer:
        futures = [producer.send(TOPIC, json.dumps({"order": i, "partition": p}).encode(),
                                 key=f"key-{i}".encode(), partition=p,
                                 headers=[("source", b"test")])
                   for p in range(2) for i in range(RECORDS)]
        futures.append(producer.send(XSS_TOPIC, XSS.encode(), key=XSS.encode(), partition=0,
                                     headers=[(XSS, XSS.encode())]))
        for future in futures:
            future.get(30)
    for group in (GROUP, XSS_GROUP):
        with Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                       "enable.auto.commit": False}) as consumer:
            consumer.assign([TopicPartition(TOPIC, p) for p in COMMITTED])
            consumer.commit({TopicPartition(TOPIC, p): o for p, o in COMMITTED.items()})
    return broker


@pytest.fixture(scope="module")
def live_member(seeded):
    """LIVE_GROUP: one subscribed consumer holding both partitions of TOPIC."""
    with Consumer({"bootstrap.servers": seeded.bootstrap, "group.id": LIVE_GROUP,
                   "client.id": "live-client", "auto.offset.reset": "earliest"}) as consumer:
        consumer.subscribe([TOPIC])
        wait_until(lambda: consumer.poll(200) is not None and len(consumer.assignment()) == 2,
                   60, message="the live member's assignment")
        yield consumer


@pytest.fixture(scope="module")
def console(seeded, tmp_path_factory):
    process = ConsoleProcess(tmp_path_factory.mktemp("console"), seeded.bootstrap)
    yield process.url
    process.stop()


@pytest.fixture(scope="module")
def read_only_console(seeded, tmp_path_factory):
    process = ConsoleProcess(tmp_path_factory.mktemp("console-ro"), seeded.bootstrap,
                             "--read-only")
    yield process.url
    process.stop()


def committed(admin, group: str) -> dict[int, int]:
    return {tp.partition: o.offset
            for tp, o in admin.list_consumer_group_offsets(group).items() if tp.topic == TOPIC}


def test_overview(console, page, shots):
    response = page.goto(console + "/")
    assert response.status == 200
    assert page.locator("h1").inner_text() == "Cluster overview"
    summary = page.locator("#cluster-summary").inner_text()
    assert "Brokers\t1" in summary
    assert page.locator("#under-replicated").inner_text() == "0"
    assert page.locator("#offline").inner_text() == "0"
    assert page.locator("#brokers").inner_text().count("controller") == 1
    shots(page, "overview")


def test_topics_search_and_topic_page(console, page, shots):
    page.goto(console + "/topics")
    page.fill("#topic-search", "ord")
    page.press("#topic-search", "Enter")
    page.wait_for_url("**/topics?q=ord*")
    table = page.locator("#topics").inner_text()
    assert TOPIC in table and XSS_TOPIC not in table
    shots(page, "topics")

    page.click(f"#topics a:text-is('{TOPIC}')")
    page.wait_for_url("**/topic?name=orders")
    assert page.locator("#topic-name").inner_text() == TOPIC
    rows = page.locator("#partitions tr").all_inner_texts()[1:]
    assert len(rows) == 2
    for row in rows:  # partition, leader, replicas, ISR, earliest, latest, messages
        cells = row.split("\t")
        assert cells[1:7] == ["1", "1", "1", "0", str(RECORDS), str(RECORDS)]
    assert "cleanup.policy\tdelete" in page.locator("#configs").inner_text()
    shots(page, "topic")


def test_message_browser(console, page, shots):
    page.goto(console + f"/topic/messages?name={TOPIC}&partition=1&last=4&encoding=json")
    rows = page.locator("#records tr").all_inner_texts()[1:]
    assert [int(r.split("\t")[0]) for r in rows] == [6, 7, 8, 9]
    assert '"order": 9' in rows[-1] and "key-9" in rows[-1] and "source: test" in rows[-1]
    assert page.locator("#records td.ts").first.inner_text().endswith("Z")  # the JS ran
    shots(page, "messages-json")

    page.goto(console + f"/topic/messages?name={TOPIC}&partition=0&offset=3&limit=2"
                        "&encoding=hex")
    rows = page.locator("#records tr").all_inner_texts()[1:]
    assert [int(r.split("\t")[0]) for r in rows] == [3, 4]
    assert "6b 65 79 2d 33" in rows[0]  # "key-3"
    shots(page, "messages-hex")

    # from a time: before every record, the first records; after them all, none
    page.goto(console + f"/topic/messages?name={TOPIC}&partition=0&from_time=2000-01-01T00:00:00"
                        "&limit=3")
    rows = page.locator("#records tr").all_inner_texts()[1:]
    assert [int(r.split("\t")[0]) for r in rows] == [0, 1, 2]
    page.goto(console + f"/topic/messages?name={TOPIC}&partition=0"
                        "&from_time=2999-01-01T00:00:00Z")
    assert "No messages in this range." in page.locator("#records").inner_text()


def test_rendered_records_and_names_are_escaped(console, page, shots):
    page.goto(console + f"/topic/messages?name={XSS_TOPIC}&partition=0&last=5")
    cell_texts = page.locator("#records tr").nth(1).inner_text()
    assert cell_texts.count(XSS) == 4  # key, value, header name and value: shown as text
    page.goto(console + "/groups")
    page.locator("#groups a", has_text="grp").click()
    page.wait_for_url("**/group?id=*")
    assert page.locator("#group-id").inner_text() == XSS_GROUP
    page.locator("#group-id").hover()
    assert page.evaluate("window.__xss") is None
    shots(page, "escaped")


def test_create_and_delete_topic(console, page, admin, shots):
    name = "created-in-browser"
    page.goto(console + "/topics")
    page.click("#create-topic")
    page.fill("#name", name)
    page.fill("#partitions", "3")
    shots(page, "topic-create")
    page.click("#review")
    assert page.locator("#confirm-name").inner_text() == name
    assert name not in admin.list_topics()  # the review step changes nothing
    shots(page, "topic-create-confirm")
    page.click("#confirm-create")
    page.wait_for_url("**/topic?name=created-in-browser*")
    assert len(admin.describe_topics([name])[name].partitions) == 3

    page.click("#delete-topic")
    page.fill("#confirm-name", name)
    shots(page, "topic-delete-confirm")
    page.click("#confirm-delete")
    page.wait_for_url("**/topics?deleted=*")
    wait_until(lambda: name not in admin.list_topics(), 30, message="the topic's deletion")


def test_group_lag_and_reset_offsets(console, page, admin, shots):
    page.goto(console + "/groups")
    page.click(f"#groups a:text-is('{GROUP}')")
    page.wait_for_url("**/group?id=billing")
    assert page.locator("#total-lag").inner_text() == str(2 * RECORDS - sum(COMMITTED.values()))
    lags = page.locator("#offsets td.lag").all_inner_texts()
    assert lags == [str(RECORDS - COMMITTED[0]), str(RECORDS - COMMITTED[1])]
    shots(page, "group")

    page.select_option("#reset-strategy", "offset")
    page.fill("#reset-offset", "5")
    page.click("#dry-run")
    page.wait_for_selector("#reset-dry-run")
    assert page.locator("#reset-plan td.new-offset").all_inner_texts() == ["5", "5"]
    assert committed(admin, GROUP) == COMMITTED  # a dry run changes nothing
    shots(page, "group-reset-dry-run")

    page.click("#apply-reset")
    page.wait_for_selector("#reset-applied")
    assert committed(admin, GROUP) == {0: 5, 1: 5}
    shots(page, "group-reset-applied")


def test_group_with_a_member_refuses_reset(console, page, admin, live_member, shots):
    page.goto(console + f"/group?id={LIVE_GROUP}")
    assert page.locator("#group-state").inner_text() == "Stable"
    members = page.locator("#members").inner_text()
    assert "live-client" in members
    assert "orders-0, orders-1" in members
    shots(page, "group-live")
    before = committed(admin, LIVE_GROUP)
    page.select_option("#reset-strategy", "earliest")
    page.click("#dry-run")
    assert "is inactive, but the current state is Stable" in \
        page.locator("#error-message").inner_text()
    assert committed(admin, LIVE_GROUP) == before


def test_read_only_refuses_writes(read_only_console, page, admin, shots):
    page.goto(read_only_console + "/topics")
    assert page.locator("#read-only").is_visible()
    assert page.locator("#create-topic").count() == 0
    assert page.goto(read_only_console + "/topics/new").status == 403
    response = page.request.post(read_only_console + "/topics/new", form={
        "name": "not-created", "partitions": "1", "replication_factor": "1",
        "confirmed": "yes"})
    assert response.status == 403 and "read-only" in response.text()
    response = page.request.post(read_only_console + "/group/reset", form={
        "id": GROUP, "strategy": "earliest", "action": "apply"})
    assert response.status == 403
    assert "not-created" not in admin.list_topics()
    page.goto(read_only_console + f"/group?id={GROUP}")
    assert page.locator("#reset-form").count() == 0
    shots(page, "read-only-group")


def test_bad_parameters_get_400(console, page):
    response = page.goto(console + f"/topic/messages?name={TOPIC}&partition=abc")
    assert response.status == 400
    assert "partition must be an integer" in page.locator("#error-message").inner_text()
    assert "Traceback" not in page.content()
    assert page.goto(console + f"/topic/messages?name={TOPIC}&encoding=rot13").status == 400
    assert page.goto(console + f"/topic/messages?name={TOPIC}&from_time=yesterday").status == 400
    assert page.goto(console + "/topic?name=no-such-topic").status == 404
    response = page.request.post(console + "/topics/new", form={"name": "x"},
                                 headers={"Origin": "http://evil.example"})
    assert response.status == 403  # a cross-site form post


def test_acls_and_quotas_pages_without_security(console, page):
    """A broker without an authorizer answers SECURITY_DISABLED, which the ACLs page says; the
    quotas page needs no authorizer, and no page asks to log in."""
    response = page.goto(console + "/acls")
    assert response.status == 409
    assert page.locator("#error-message").inner_text().startswith("SECURITY_DISABLED")
    assert page.goto(console + "/quotas").status == 200
    assert page.locator("#quotas").is_visible() and page.locator("#logout").count() == 0


def test_tool_usage_errors():
    result = subprocess.run([*ODRADEK, "console"], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 1 and "--bootstrap-server" in result.stderr
    result = subprocess.run([*ODRADEK, "console", "--bootstrap-server", "x:1", "--listen",
                             "nope"], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 1 and "HOST:PORT" in result.stderr


