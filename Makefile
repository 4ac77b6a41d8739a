# Causeway's entry points. `make up` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/pip
STAMP  := $(VENV)/.installed
# `make test` runs the suite on two workers (pytest-xdist), each taking whole files, so a module's
# shared cluster or Spark session stays in one process; most of the suite's time is spent waiting
# on brokers, ZooKeeper and clients rather than computing. PYTEST_WORKERS= runs it in one process.
# The Spark pipeline's tests run after them, in one process of their own: they share one Spark
# session, and on a worker between other files it lost its registered Python data sources
# (DATA_SOURCE_NOT_FOUND) in two runs of three. Spark looks a Python sink up in the active session
# of the calling JVM thread, which a thread of py4j's other than the session's maker lacks (another
# Python thread, or a new connection py4j opened after one broke): the copy now sets it for its
# writes (pipeline.spark.writing_to). What moved the tests' thread there was not caught: one full
# run with the pipeline on the workers passed its pipeline tests, so they stay apart until more do.
PYTEST_WORKERS ?= -n 2 --dist loadfile
# Debian packages the tests drive: kcat is one of the real clients that judge the broker; Maven
# and Java fetch and run Apache Kafka's own tools (make peers; the JDK's javac builds the small
# Java programs under bench/peers, such as MM2's offset translation); zookeeper is the coordination
# service of ZooKeeper-mode clusters (deploy/zookeeper); prometheus is the server `causeway up`
# starts for `monitoring: prometheus` (deploy/prometheus_process.py; never the package's own service)
# and its promtool checks the alerting rules. Each entry is PACKAGE[:COMMAND], where COMMAND may be
# an absolute path to a file the package installs (zookeeper puts none on PATH).
SYSTEM_PACKAGES := kcat maven:mvn openjdk-17-jdk-headless:javac zookeeper:/usr/share/java/zookeeper.jar \
                   prometheus:/usr/bin/prometheus

.PHONY: install up test bytecode docs peers test-fast chaos fuzz system-deps constraints lint typecheck bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml constraints.txt
	$(PIP) install --quiet --constraint constraints.txt --editable '.[test,dev,pipeline]'
	touch $@

install: $(STAMP)

# Installs the Debian packages the tests need when run as root; otherwise says what is missing.
system-deps:
	@missing=""; for e in $(SYSTEM_PACKAGES); do c=$${e##*:}; { case $$c in /*) [ -e $$c ];; *) command -v $$c >/dev/null 2>&1;; esac; } || missing="$$missing $${e%%:*}"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing system packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "warning: missing system packages:$$missing (run as root or install them)"; fi; \
	fi

up: install system-deps
	$(BIN)/causeway up examples/two-dc.yaml

test: install system-deps peers bytecode
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site
	$(BIN)/python -m pytest -q $(PYTEST_WORKERS) --ignore=tests/pipeline
	$(BIN)/python -m pytest -q tests/pipeline

# The project's own modules compiled to bytecode (__pycache__, git-ignored) once, before the
# tests start thousands of Python processes (brokers, mirrors, the CLI) that import them: where
# PYTHONDONTWRITEBYTECODE is set, as on this project's machines, no process ever writes it, and
# each one compiled its imports from source again (about 0.3 s of CPU per process). Python only
# reads it where the source is unchanged since; an edited module is compiled anew.
bytecode: install
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m compileall -q -j 0 broker bench deploy mirror pipeline security tools topology tests

# The manual (docs/, mkdocs.yml) into site/, offline; --strict: a broken link or anchor, or a page
# missing from the nav, fails the build (make test builds it too). Never --quiet: it hides the
# warnings that --strict counts, and the build then passes whatever is broken.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# Apache Kafka's jars (broker, tools, MirrorMaker 2) from Maven Central into a cache outside the
# repo (~/.cache/causeway/peers, or $$CAUSEWAY_PEERS_DIR), per bench/peers/pom.xml. Silent when cached.
peers: install system-deps
	@$(BIN)/python -m bench.peers fetch

# Unit tests only: no processes, no real clients.
test-fast: install
	$(BIN)/python -m pytest -q tests/unit

# The long chaos matrix: real processes, seeded faults over the emulated WAN link and on the
# processes; prints one line per scenario, exits 1 on anything lost, reordered or corrupted.
# SEED=N picks another schedule. Then Kafka's replication matrix on a 3-broker ZooKeeper cluster
# (deploy/chaos/replication.py) and the hostile-bytes matrix (forged LinkAppend, controller
# requests and znodes beside a link mirror: deploy/chaos/hostile.py) and the DR round-trip matrix
# (`causeway drill` failback or failover on examples/dr.yaml: planned, kill, partition x link, mm2
# x a Causeway source), then the DR matrix's Apache Kafka source column: the same disasters x
# modes as failover drills from a Kafka 4.x primary (tests/compat/test_drill_kafka_source.py, all
# six: `-m ''` lifts the `not chaos` filter of pyproject's addopts; make test runs its kill x link;
# no failback to Kafka, see deploy/chaos/dr.py). Both run; the target fails if either failed.
# MATRIX=mirror, MATRIX=replication, MATRIX=hostile or MATRIX=dr runs one of them.
chaos: install system-deps peers
	status=0; $(BIN)/python -m deploy.chaos --matrix $(or $(MATRIX),all) --seed $(or $(SEED),1) || status=1; \
	case $(or $(MATRIX),all) in all|dr) \
	  $(BIN)/python -m pytest -q -m '' tests/compat/test_drill_kafka_source.py || status=1;; esac; exit $$status

# The long fuzz run: FRAMES mutated frames (default 1000000) of every API against a broker it
# starts; one summary line, exit 1 if the broker died, leaked memory, sockets or files, stopped
# answering, or failed a real client's round trip. SEED=N picks other frames.
fuzz: install
	$(BIN)/python -m deploy.fuzz --frames $(or $(FRAMES),1000000) --seed $(or $(SEED),1)

lint: install
	$(BIN)/ruff check .

typecheck: install
	$(BIN)/mypy

bench: install
	$(BIN)/python -m bench
	$(BIN)/python -m bench.mirror
	@if $(BIN)/python -c 'from bench.peers import peer; peer("kafka4").jars()' 2>/dev/null; \
	then $(BIN)/python -m bench.side_by_side && $(BIN)/python -m bench.security; \
	else echo "bench: Apache Kafka beside Causeway skipped: the peers are not fetched (make peers)"; fi

# Re-resolve the pins after changing dependencies in pyproject.toml.
constraints:
	rm -rf /tmp/causeway-pin && $(PYTHON) -m venv /tmp/causeway-pin
	/tmp/causeway-pin/bin/pip install --quiet --upgrade pip
	/tmp/causeway-pin/bin/pip install --quiet '.[test,dev,pipeline]'
	( echo '# Exact versions for every Python dependency, so a fresh machine installs what CI tested.'; \
	  echo '# Regenerate with: make constraints'; \
	  /tmp/causeway-pin/bin/pip freeze --exclude causeway | sort -f ) > constraints.txt

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
