# The README's quick start repeats these targets word for word.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run worker test lint fmt up

$(STAMP): requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.lock
	touch $(STAMP)

## setup: create .venv (if missing) and install the pinned dependencies
setup: $(STAMP)

## run: migrate, load the demo on first run, start web server + Celery worker
run: setup
	$(BIN)/python scripts/run.py

## worker: start only a Celery worker (uses CELERY_BROKER_URL or the embedded broker)
worker: setup
	$(BIN)/celery -A rcp_platform worker --loglevel=info

## test: the whole test suite (SQLite by default; DATABASE_URL=postgres://... for PostgreSQL)
test: setup
	$(BIN)/pytest

## lint: ruff
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

fmt: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

## up: the production-like stack (needs Docker)
up:
	docker compose up --build
