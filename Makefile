# Efficient Transformers, Hands-On
#   make lab     create .venv, install the course, open JupyterLab on notebooks/
#                (make lab PORT=9999 picks the port; as root it adds --allow-root)
#   make test    same set-up, then every test (unit, lessons in smoke mode, browser, smoke site)
#   make report  execute every lesson at learner defaults into build/, with a summary page
#
# TORCH_SPEC chooses the torch requirement. The default is the normal release; CI on a
# CPU-only machine passes TORCH_SPEC=torch==2.13.0 (a CPU wheel) to avoid a multi-GB CUDA
# download. torch is installed in the same pip call as the course so pip cannot swap it.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch
PORT ?= 8888
# pytest-xdist workers for the unit tests and the lessons, one torch thread each: on this 2-core
# machine 2 workers took the smoke lessons from 268 s to 144 s, the unit tests from 113 s to
# 84 s and the browser suite from 778 s to 558 s (each worker its own JupyterLab and Chromium).
JOBS ?= 2
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PYTHONHASHSEED := 0

.PHONY: lab test test-unit test-notebooks test-nbval test-browser test-gpu widget-times report site test-site test-site-smoke test-compat clean install

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)" -e ".[dev,real]"
	touch $(STAMP)

# JupyterLab refuses to start as root without --allow-root (containers, cloud VMs): pass it
# only when the user id is 0. On a machine without a browser, open the URL printed below
# (Jupyter prints the same URL with its access token as it starts).
ALLOW_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)

lab: $(STAMP)
	@echo "Starting JupyterLab on port $(PORT): open http://localhost:$(PORT)/lab"
	@echo "(use the full URL with ?token=... that Jupyter prints below; Ctrl-C stops it)"
	$(BIN)/jupyter lab notebooks/ --port=$(PORT) $(ALLOW_ROOT)

# Each check runs once: the Colab cells, the checkpoints' checksums and "no outputs" are unit
# tests (tests/test_project.py, tests/test_notebooks.py); nbstripout --verify also checks the
# metadata it strips; ruff lints the library and the tests. Each lesson runs once, in JupyterLab
# in a headless browser (test-browser: Run All, then every check of a smoke run on what it wrote,
# then its widgets moved; two lessons at a time), or, where Chromium is missing, with papermill
# (test-notebooks: the same checks, no widgets moved). The run is kept in build/smoke for the
# smoke site. (Papermill and the browser side by side, as make test once ran them, stalled the
# papermill kernels' widget-cell replies in 3 of 13 lessons on this 2-core machine.)
CHROMIUM ?= /usr/bin/chromium
test: $(STAMP)
	$(BIN)/nbstripout --verify notebooks/*.ipynb
	$(BIN)/ruff check course_lib tests
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n $(JOBS) tests -m "not notebooks and not browser and not gpu and not site"
	@if [ -x "$(CHROMIUM)" ] && $(BIN)/python -c "import playwright.sync_api, jupyterlab" 2>/dev/null; then \
		$(MAKE) --no-print-directory test-browser; \
	else \
		echo "make test: no Chromium at $(CHROMIUM) (or no playwright/jupyterlab): the lessons run with papermill instead (widgets not moved)"; \
		$(MAKE) --no-print-directory test-notebooks; \
	fi
	$(MAKE) --no-print-directory test-site-smoke

test-unit: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n $(JOBS) tests -m "not notebooks and not browser and not gpu and not site"

# On a CUDA machine (a Colab GPU, a lent GPU): every lesson in smoke mode on the GPU, failing on
# any error, widget-callback error, time recorded without its device, or GPU section that
# skipped; plus the GPU unit tests (tests/test_gpu.py). It installs the [gpu] extra first (torchao,
# for lesson 07's GPU int8). Without CUDA it says so and exits 0.
test-gpu: $(STAMP)
	@if $(BIN)/python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then \
		$(BIN)/python -m pip install -q -e ".[gpu]" && \
		$(BIN)/python -m pytest -q tests/test_gpu.py -m gpu; \
	else \
		echo "make test-gpu: no CUDA device here (torch.cuda.is_available() is False); nothing to run."; \
	fi

# The papermill run executes every lesson in smoke mode, one torch thread (much of a smoke run is
# kernel start-up and imports). nbval (not part of make test: it repeats papermill's execution)
# is kept for a quick look: a lost kernel reply (nbclient issue 312) makes nbval wait out the cell
# timeout, then the cell passes and the notebook's later cells run as non-strict xfail; 120 s
# bounds that cost. The papermill run retries instead (course_lib.tools.notebook_runner).
# Keeps each executed smoke lesson and its results in build/smoke, for the smoke site.
test-notebooks: $(STAMP)
	rm -rf build/smoke
	COURSE_SMOKE_KEEP=build/smoke OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n $(JOBS) tests -m notebooks

test-nbval: $(STAMP)
	COURSE_SMOKE=1 OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q --nbval-lax \
		--nbval-cell-timeout=120 -p no:randomly notebooks/

# JupyterLab + headless Chromium (/usr/bin/chromium; CHROMIUM=... overrides); screenshots in
# build/browser/. Every lesson in smoke mode, $(JOBS) at a time (each worker its own JupyterLab
# and Chromium, one torch thread per kernel), with the smoke run's checks; keeps the run in
# build/smoke. Skips with the reason when chromium or playwright is missing.
test-browser: $(STAMP)
	rm -rf build/smoke
	CHROMIUM=$(CHROMIUM) COURSE_SMOKE_KEEP=build/smoke OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n $(JOBS) tests/browser -m browser

# Widget response times at learner defaults: every lesson run in full in JupyterLab (about as
# long as make report), each widget moved; build/browser/widget_times.json. ONLY="04_ or 05_"
# picks lessons (a pytest -k expression).
widget-times: $(STAMP)
	BROWSER_FULL=1 BROWSER_RUN_TIMEOUT=600 $(BIN)/python -m pytest -q -s tests/browser -m browser $(if $(ONLY),-k "$(ONLY)")

report: $(STAMP)
	$(BIN)/python -m course_lib.tools.report --out build

# The course as a static website in build/site, from what `make report` wrote to build/
# (SITE_REPORT=... builds it from another report folder, e.g. a smoke run). Sphinx + myst-nb +
# sphinx-book-theme, installed on first use (the [site] extra); open build/site/index.html.
SITE_REPORT ?= build
SITE_STAMP := $(VENV)/.site-installed
$(SITE_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e ".[site]"
	touch $(SITE_STAMP)

site: $(SITE_STAMP)
	$(BIN)/python -m course_lib.tools.site --report $(SITE_REPORT) --out build/site

# The built site in headless Chromium: no console errors, every figure, one row per claim,
# internal links, search.
test-site: site
	SITE_DIR=build/site $(BIN)/python -m pytest -q tests/website -m site

# The site built from the smoke run that test-browser (or test-notebooks) kept, and the same browser checks: what
# CI builds and tests (the full site needs make report's 25 minutes; make test-site builds it).
test-site-smoke: $(SITE_STAMP)
	$(BIN)/python -m course_lib.tools.site --report build/smoke --out build/smoke-site
	SITE_DIR=build/smoke-site $(BIN)/python -m pytest -q tests/website -m site

# Another torch in a venv of its own (build/compat-venv): the unit tests and every lesson in
# smoke mode. TORCH_SPEC picks it; the default is the oldest release pyproject.toml allows.
# A CUDA build from PyPI (about 5 GB, 2 minutes here), so it is not part of make test.
COMPAT_VENV ?= build/compat-venv
test-compat:
	test -x $(COMPAT_VENV)/bin/python || $(PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python -m pip install -q "$(if $(filter torch,$(TORCH_SPEC)),torch==2.6.0,$(TORCH_SPEC))" -e ".[dev,real]"
	$(COMPAT_VENV)/bin/python -c "import torch; print('make test-compat: torch', torch.__version__)"
	OMP_NUM_THREADS=1 $(COMPAT_VENV)/bin/python -m pytest -q -n $(JOBS) tests -m "not notebooks and not browser and not gpu and not site"
	OMP_NUM_THREADS=1 $(COMPAT_VENV)/bin/python -m pytest -q -n $(JOBS) tests -m notebooks

clean:
	rm -rf build .pytest_cache
