# The two commands of the README: `make run` (the main job) and `make test` (every check).
# Both create the environment .venv first when it is missing or stale.
.PHONY: run test env lint types docs
VENV := .venv
PY := $(VENV)/bin/python

env:
	@bash scripts/bootstrap.sh

run: env
	$(PY) examples/train_digits.py --out result

test: env
	bash scripts/check.sh

lint: env
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

types: env
	$(VENV)/bin/mypy

docs: env
	$(VENV)/bin/mkdocs build --strict --site-dir site
