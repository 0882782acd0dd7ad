# hubstream: every target installs what it needs first; `make run` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NPM_STAMP := node_modules/.installed
PYTEST_ARGS ?=

.PHONY: install lock run test lint stop clean

install: $(STAMP) $(NPM_STAMP)
	@sh scripts/ensure_deb.sh /usr/bin/chromium chromium fonts-dejavu-core  # the dashboard's browser test
	@sh scripts/ensure_deb.sh /usr/sbin/mariadbd mariadb-server  # the binlog reader's own server

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
	$(BIN)/ruff check app agents tables spark_ingest tests bench examples
	$(BIN)/ruff format --check app agents tables spark_ingest tests bench examples
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

test: install lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

stop:
	@if [ -x $(BIN)/hubstream ]; then $(BIN)/hubstream stack down; else echo "nothing to stop"; fi

clean: stop
	rm -rf .hubstream
