# Odradek: `make run` starts a single-node platform on localhost:9092, `make test` runs the tests.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run run-secure run-cluster test venv generate bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

# kcat comes from Debian; installed only when missing.
kcat:
	@command -v kcat >/dev/null 2>&1 || { \
	  echo "installing kcat from Debian"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat) >/dev/null; }

.PHONY: kcat

# Spark (odradek.spark and its tests) needs Java 17+; from Debian, installed only when missing.
java:
	@command -v java >/dev/null 2>&1 || { \
	  echo "installing Java 17 from Debian"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	   openjdk-17-jre-headless) >/dev/null; }

.PHONY: java

# The web console's browser tests (tests/console) drive Debian's Chromium through Playwright;
# installed only when missing.
chromium:
	@test -x /usr/bin/chromium || { \
	  echo "installing Chromium from Debian"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
	  >/dev/null; }

.PHONY: chromium

# Byte-compile once so every broker/tool process starts fast, even where the environment
# sets PYTHONDONTWRITEBYTECODE (the generated codecs are large).
bytecode: $(STAMP)
	@$(PY) -m compileall -q src >/dev/null

.PHONY: bytecode

run: bytecode
	$(VENV)/bin/odradek server-start

# The secure example (config/secure.properties): TLS + SCRAM-SHA-512 on localhost:9092, a
# throwaway CA and certificates in odradek-secure/ (needs the test extra's `cryptography`),
# the SCRAM user admin/admin-secret created at format time. Clients: odradek-secure/client.properties.
run-secure: bytecode
	$(PY) tools/secure_example.py odradek-secure
	@test -f odradek-secure-data/meta.properties || $(VENV)/bin/odradek storage format \
		--config config/secure.properties --cluster-id "$$($(VENV)/bin/odradek storage random-uuid)" \
		--add-scram 'SCRAM-SHA-512=[name=admin,password=admin-secret]'
	$(VENV)/bin/odradek server-start config/secure.properties

# A local cluster of NODES combined broker+controller nodes (one process each, brokers on
# 9092.., controllers on 9192..) in the foreground; Ctrl-C stops them. Data in odradek-cluster/.
NODES ?= 3
run-cluster: bytecode
	$(VENV)/bin/odradek cluster-start --nodes $(NODES)

test: bytecode kcat java chromium
	$(PY) -m pytest -q

# On-demand fault-injection runs (docs/faults.md): each scenario against a fresh 3-node cluster
# for DURATION seconds of faults, RF=3, min.insync.replicas=2; SEED replays a run. The short
# fault tests are in tests/faults/ and run with `make test`.
FAULT_SCENARIOS ?= kill-leader pause-leader partition-leader
DURATION ?= 40
RF ?= 3
SEED ?=
faults: bytecode
	@status=0; for scenario in $(FAULT_SCENARIOS); do \
	  $(PY) tests/faults/run.py --scenario $$scenario --duration $(DURATION) --rf $(RF) \
	    $(if $(SEED),--seed $(SEED)) || status=1; \
	done; exit $$status

.PHONY: faults

generate: $(STAMP)
	$(PY) tools/gen_protocol.py

bench: $(STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) odradek-data odradek-cluster odradek-secure odradek-secure-data
