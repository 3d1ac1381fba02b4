"""`odradek console --bootstrap-server HOST:PORT [--listen HOST:PORT] [--read-only]
[--command-config FILE] [--sasl-mechanism M] [--session-timeout-minutes N]
[--sample-interval-ms MS] [--metrics-url URL ...]`: serve the web console until interrupted.
With a SASL `security.protocol` the console's users log in as users of the cluster
(`odradek.console.auth`)."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from aiohttp import web

from odradek.cli.common import ToolArgumentParser, configure_logging, run_tool
from odradek.cli.tool_options import load_properties_file
from odradek.console.app import make_app
from odradek.console.auth import DEFAULT_SESSION_TIMEOUT_S, SASL_PROTOCOLS, config_error
from odradek.console.sampler import DEFAULT_SAMPLE_INTERVAL_MS

DEFAULT_LISTEN = "127.0.0.1:8080"


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen must be HOST:PORT, not {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def parser() -> ToolArgumentParser:
    p = ToolArgumentParser(prog="odradek console",
                           description="Serve Odradek's web console for a cluster.")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                   help="the cluster to connect to")
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"where to serve the console (default {DEFAULT_LISTEN}; port 0 picks "
                        "a free one)")
    p.add_argument("--read-only", action="store_true",
                   help="refuse every change (HTTP 403) and hide the forms that make them")
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties (security settings...) for the console's clients")
    p.add_argument("--sasl-mechanism", metavar="MECHANISM",
                   help="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512: users log in with it (sets "
                        "security.protocol to SASL_PLAINTEXT unless the config has SASL_SSL)")
    p.add_argument("--session-timeout-minutes", type=float,
                   default=DEFAULT_SESSION_TIMEOUT_S / 60, metavar="N",
                   help="a logged-in user's session ends after N idle minutes (default "
                        f"{DEFAULT_SESSION_TIMEOUT_S // 60:g})")
    p.add_argument("--sample-interval-ms", type=int, default=DEFAULT_SAMPLE_INTERVAL_MS,
                   metavar="MS", help="how often lag and throughput are sampled for the charts "
                   f"(default {DEFAULT_SAMPLE_INTERVAL_MS})")
    p.add_argument("--metrics-url", action="append", default=[], metavar="URL",
                   help="a broker's Prometheus metrics (metrics.prometheus.listener, e.g. "
                        "http://broker1:9404/metrics) for the bytes/s charts; once per broker")
    return p


async def serve(client_config: dict, host: str, port: int, read_only: bool,
                session_timeout_s: float | None = None,
                sample_interval_ms: int = DEFAULT_SAMPLE_INTERVAL_MS,
                metrics_urls: list[str] | None = None) -> None:
    app = make_app(client_config, read_only=read_only, session_timeout_s=session_timeout_s,
                   sample_interval_ms=sample_interval_ms, metrics_urls=metrics_urls or ())
    runner = web.AppRunner(app, access_log=logging.getLogger("odradek.console.access"))
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    for address in runner.addresses:
        # the line a script (or a test) waits for, with the port actually bound
        print(f"Odradek console listening on http://{address[0]}:{address[1]}/"
              f"{' (read-only)' if read_only else ''}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def _main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    configure_logging(logging.INFO)
    try:
        host, port = parse_listen(args.listen)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 1
    client_config: dict = {}
    if args.command_config:
        client_config.update(load_properties_file(args.command_config))
    client_config["bootstrap.servers"] = args.bootstrap_server
    if args.sasl_mechanism:
        client_config["sasl.mechanism"] = args.sasl_mechanism.upper()
        if str(client_config.get("security.protocol", "")).upper() not in SASL_PROTOCOLS:
            client_config["security.protocol"] = "SASL_PLAINTEXT"
    problem = config_error(client_config)
    if args.session_timeout_minutes <= 0:
        problem = "--session-timeout-minutes must be positive"
    if args.sample_interval_ms < 100:
        problem = "--sample-interval-ms must be at least 100"
    if problem:
        print(problem, file=sys.stderr)
        return 1
    asyncio.run(serve(client_config, host, port, args.read_only,
                      args.session_timeout_minutes * 60, args.sample_interval_ms,
                      args.metrics_url))
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_tool(_main, sys.argv[1:] if argv is None else argv)
