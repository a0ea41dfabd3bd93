# rtr-serve developer entry points. `make run` and `make test` are the README quick start.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# Two stamps: `make run` needs only the runtime dependencies ($(RUN_STAMP)); every developer
# target adds the test, dev and duckdb extras on top ($(STAMP)).
RUN_STAMP := $(VENV)/.installed-run
STAMP     := $(VENV)/.installed
LISTEN ?= 127.0.0.1:8323
HTTP   ?= 127.0.0.1:8080
EXAMPLE ?= examples/rpki-client-example.json

.PHONY: run test lint typecheck imports unit interop bench docs clean venv test-deps

venv: $(STAMP)

$(RUN_STAMP): pyproject.toml
	@if ! $(PYTHON) -c 'import venv, ensurepip' 2>/dev/null; then \
	  echo "python3-venv is missing; installing it (Debian)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv; \
	fi
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e .
	@touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q -e '.[test,dev,duckdb]'
	@touch $(STAMP)

run: $(RUN_STAMP)
	$(VENV)/bin/rtr-serve --source $(EXAMPLE) --listen $(LISTEN) --http $(HTTP) --notify-interval 5

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

imports: $(STAMP)
	$(VENV)/bin/lint-imports

# The RTR-client tests follow a real StayRTR and the dashboard test drives headless Chromium
# (Debian packages); install them when missing. The systemd unit is checked with
# systemd-analyze verify (Debian package systemd; systemd need not run); without it that one
# test is skipped. The black-box wall-clock tests (tests/blackbox) move the clock of a real
# rtr-serve with libfaketime (Debian package faketime).
test-deps:
	@command -v stayrtr >/dev/null 2>&1 || { \
	  echo "installing stayrtr (Debian) for the RTR client tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stayrtr; }
	@command -v faketime >/dev/null 2>&1 || { \
	  echo "installing faketime (Debian) for the black-box wall-clock tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq faketime; }
	@command -v systemd-analyze >/dev/null 2>&1 || { \
	  echo "installing systemd (Debian) for systemd-analyze verify of contrib/systemd"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd \
	  || echo "systemd-analyze unavailable: the unit is checked structurally only"; }
	@command -v systemd-socket-activate >/dev/null 2>&1 || { \
	  echo "installing systemd (Debian) for the socket activation tests (systemd-socket-activate)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd \
	  || echo "systemd-socket-activate unavailable: the socket activation tests skip"; }
	@bash .ci/chromium-setup.sh

unit: $(STAMP) test-deps
	$(VENV)/bin/pytest -v tests

test: lint typecheck imports unit

interop: $(STAMP)
	$(VENV)/bin/pytest -v -m interop --durations=10 interop-tests

bench: $(STAMP)
	$(PY) bench/snapshot_bench.py

# The generated API reference (pdoc, Google-style docstrings) of every package, in build/docs/.
docs: $(STAMP)
	rm -rf build/docs
	$(VENV)/bin/pdoc --docformat google --output-directory build/docs \
	  upstream persistence snapshot rtr_protocol rtr_server
	@echo "API reference: build/docs/index.html"

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache
