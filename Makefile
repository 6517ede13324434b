# Build the site and run the tests from a fresh clone (see README.md).
#   make site    venv + CPU-only torch + docs deps, then mkdocs build (strict, notebooks executed, evidence gate)
#   make test    the above plus test deps and Debian chromium, then ruff and pytest -m "not gpu" (a worker per core)
#   make serve   preview on http://127.0.0.1:8000/
#   make plotly-js  refresh docs/assets/kp/plotly-cartesian.min.js after changing the plotly pin
# VENV=/path/to/venv reuses an existing environment.

SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
# Where pip finds torch 2.13.0. Empty: the default index (on the project's CI
# machines that resolves to a local CPU wheel). Elsewhere pass the CPU index,
# e.g. `make site TORCH_INDEX=https://download.pytorch.org/whl/cpu`, so pip
# never pulls the multi-GB CUDA build.
TORCH_INDEX ?=
# Material prints a banner about its future on every build; it says nothing about this site.
export NO_MKDOCS_2_WARNING := 1

.PHONY: install site test lint chromium serve clean plotly-js

$(VENV)/.kp-installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first and pinned: an unpinned install pulls a multi-GB CUDA build.
	$(PY) -m pip install torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install -e '.[docs,test]'
	touch $@

install: $(VENV)/.kp-installed

site: install
	$(PY) -m mkdocs build

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# The browser tests drive Debian's chromium (Playwright never downloads a browser here).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian chromium for the browser tests"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium >/dev/null; }

# pytest exits 5 when it collects no test: nothing failed, so say so and pass.
test: install chromium site lint
	rc=0; $(PY) -m pytest -m "not gpu" -n auto --dist loadgroup || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests (exit 5): nothing failed"; rc=0; fi; \
	exit $$rc

# The site serves plotly.js's cartesian bundle (bar, box, heatmap and scatter traces:
# every chart here), a third of the full bundle's size, in the version the pinned
# plotly writes figures for (tests/test_charts.py checks that the two agree).
plotly-js: install
	set -e; v=$$($(PY) -c 'import plotly.offline as o; print(o.get_plotlyjs_version())'); \
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	( cd "$$tmp" && npm pack -q plotly.js-cartesian-dist-min@$$v >/dev/null \
	  && tar xzf plotly.js-cartesian-dist-min-$$v.tgz ); \
	cp "$$tmp/package/plotly-cartesian.min.js" docs/assets/kp/

serve: install
	$(PY) -m mkdocs serve -a 127.0.0.1:8000

clean:
	rm -rf site .cache
