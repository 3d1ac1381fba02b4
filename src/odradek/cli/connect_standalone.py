"""`odradek connect-standalone WORKER.properties CONNECTOR.properties...`: Kafka's
connect-standalone.sh.

Runs the connectors (FileStreamSource, FileStreamSink) as Spark streaming queries in one local
SparkSession (`odradek.spark.connect`) until Ctrl-C or SIGTERM, then stops them between
micro-batches. Connector configs are .properties files or JSON (``{"name": ..., "config":
{...}}`` or a flat object), as in Kafka 3.8. Without arguments (or with --help) it prints the
usage and exits with 1, as Kafka does.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from pathlib import Path

from odradek.cli.common import ToolError, configure_logging, run_tool
from odradek.cli.tool_options import load_properties_file

log = logging.getLogger("org.apache.kafka.connect.cli.ConnectStandalone")

USAGE = "Usage: ConnectStandalone worker.properties [connector1.properties connector2.json ...]"
#: how often the main thread looks at the queries while waiting for a signal
_POLL_S = 0.5


def load_connector_config(path: str) -> dict[str, str]:
    if not path.endswith(".json"):
        return load_properties_file(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} (No such file or directory)") from None
    if not isinstance(data, dict):
        raise ToolError(f"{path}: a connector config must be a JSON object")
    if isinstance(data.get("config"), dict):
        config = {str(k): str(v) for k, v in data["config"].items()}
        if "name" in data:
            config.setdefault("name", str(data["name"]))
        return config
    return {str(k): str(v) for k, v in data.items()}


def _run(argv: list[str]) -> int:
    if not argv or "--help" in argv:
        print(USAGE, file=sys.stderr)
        return 1
    from odradek.spark.connect import ConnectConfigError, StandaloneWorker

    try:
        worker_props = load_properties_file(argv[0])
        connector_props = [load_connector_config(path) for path in argv[1:]]
        worker = StandaloneWorker(worker_props, connector_props)
    except (OSError, ConnectConfigError) as exc:
        raise ToolError(f"ERROR Stopping due to error: {exc}") from None

    stop = threading.Event()

    def request_stop(_signum, _frame) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    log.info("Kafka Connect standalone worker initializing ...")
    worker.start()
    # after the SparkSession exists: pyspark installs its own SIGINT handler
    signal.signal(signal.SIGINT, request_stop)
    log.info("Kafka Connect started")
    reported: set[str] = set()
    try:
        while not stop.wait(_POLL_S):
            for name, error in worker.failures().items():
                if name not in reported:
                    reported.add(name)
                    log.error("Connector %s failed: %s", name, error)
    finally:
        log.info("Kafka Connect stopping")
        if worker.spark is not None:  # quiet: micro-batches refused while stopping log errors
            worker.spark.sparkContext.setLogLevel("OFF")
        worker.stop()
        log.info("Kafka Connect stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    configure_logging(logging.INFO)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines are per callback
    return run_tool(_run, sys.argv[1:] if argv is None else argv)
