# Every target CI needs; `.ci/run` calls these.
PY ?= .venv/bin/python
VENV ?= .venv

-include mk/kafka.mk

LINTED := streamwatch tests benchmarks $(wildcard producers)

.PHONY: setup lint typecheck test check demo bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

lint: setup
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)

typecheck: setup
	$(VENV)/bin/mypy

test: setup
	$(PY) -m pytest -q; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

check: lint typecheck test

demo: setup
	$(VENV)/bin/streamwatch demo

bench: setup
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build *.egg-info
