# hubstream: every target installs what it needs first; `make run` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NPM_STAMP := node_modules/.installed
PYTEST_ARGS ?=

.PHONY: install lock run test test-unit test-services lint stop clean _lint _unit-models _unit-rest
LINT_PATHS := app agents tables spark_ingest tests bench examples

install: $(STAMP) $(NPM_STAMP)
	@sh scripts/ensure_deb.sh /usr/bin/chromium chromium fonts-dejavu-core  # the dashboard's browser test
	@sh scripts/ensure_deb.sh /usr/sbin/mariadbd mariadb-server  # the binlog reader's own server
	@sh scripts/ensure_deb.sh /usr/bin/stunnel4 stunnel4  # TLS in front of a test broker (Kafka security tests)

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c requirements.lock -e '.[dev]'
	touch $(STAMP)

# Re-pin requirements.lock from a fresh venv holding exactly what pyproject.toml asks for.
lock:
	rm -rf .lockvenv && $(PYTHON) -m venv .lockvenv
	.lockvenv/bin/python -m pip install --quiet --upgrade pip
	.lockvenv/bin/python -m pip install --quiet -e '.[dev]'
	{ head -2 requirements.lock; .lockvenv/bin/pip freeze --exclude-editable; } > requirements.lock.new
	mv requirements.lock.new requirements.lock && rm -rf .lockvenv

$(NPM_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $(NPM_STAMP)

run: install
	$(BIN)/hubstream run

lint: install
	@$(MAKE) --no-print-directory _lint

_lint:
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

# Everything: lint, then the whole suite (unit, integration against the real services, reliability).
test: install lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The fast gate, no services: lint and tests/unit. Three processes side by side (the lint, the
# exhaustive model checks, the other unit tests) so it stays under two minutes on 2 cores; each
# one's output is printed when it ends.
test-unit: install
	@$(MAKE) --no-print-directory -j3 --output-sync=target _lint _unit-models _unit-rest

# Unit tests leak nothing: an unclosed file, socket or session fails them (for the suites that
# run the services pyproject only lists them in the warnings summary; a leak found in __del__ is
# "unraisable").
UNIT_WARNINGS := -W error::ResourceWarning -W error::pytest.PytestUnraisableExceptionWarning

_unit-models:
	$(BIN)/python -m pytest -q $(UNIT_WARNINGS) tests/unit/modelcheck $(PYTEST_ARGS)

_unit-rest:
	$(BIN)/python -m pytest -q $(UNIT_WARNINGS) tests/unit --ignore=tests/unit/modelcheck $(PYTEST_ARGS)

# The tests that need the real services (started by the test session): what `test` adds to
# `test-unit`. CI runs `make test-unit && make test-services`.
test-services: install
	$(BIN)/python -m pytest tests/integration tests/reliability $(PYTEST_ARGS)

stop:
	@if [ -x $(BIN)/hubstream ]; then $(BIN)/hubstream stack down; else echo "nothing to stop"; fi

clean: stop
	rm -rf .hubstream
