# Causeway's entry points. `make up` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/pip
STAMP  := $(VENV)/.installed
# Debian packages the tests drive: kcat is one of the real clients that judge the broker.
SYSTEM_PACKAGES := kcat

.PHONY: install up test test-fast chaos system-deps constraints lint typecheck bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml constraints.txt
	$(PIP) install --quiet --constraint constraints.txt --editable '.[test,dev]'
	touch $@

install: $(STAMP)

# Installs the Debian packages the tests need when run as root; otherwise says what is missing.
system-deps:
	@missing=""; for p in $(SYSTEM_PACKAGES); do command -v $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing system packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "warning: missing system packages:$$missing (run as root or install them)"; fi; \
	fi

up: install
	$(BIN)/causeway up examples/two-dc.yaml

test: install system-deps
	$(BIN)/python -m pytest -q

# Unit tests only: no processes, no real clients.
test-fast: install
	$(BIN)/python -m pytest -q tests/unit

# The long chaos matrix: real processes, seeded faults over the emulated WAN link and on the
# processes; prints one line per scenario, exits 1 on anything lost, reordered or corrupted.
# SEED=N picks another schedule.
chaos: install
	$(BIN)/python -m deploy.chaos --seed $(or $(SEED),1)

lint: install
	$(BIN)/ruff check .

typecheck: install
	$(BIN)/mypy

bench: install
	$(BIN)/python -m bench
	$(BIN)/python -m bench.mirror

# Re-resolve the pins after changing dependencies in pyproject.toml.
constraints:
	rm -rf /tmp/causeway-pin && $(PYTHON) -m venv /tmp/causeway-pin
	/tmp/causeway-pin/bin/pip install --quiet --upgrade pip
	/tmp/causeway-pin/bin/pip install --quiet '.[test,dev]'
	( echo '# Exact versions for every Python dependency, so a fresh machine installs what CI tested.'; \
	  echo '# Regenerate with: make constraints'; \
	  /tmp/causeway-pin/bin/pip freeze --exclude causeway | sort -f ) > constraints.txt

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
