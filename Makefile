# Quantized GEMM from Scratch. Each target sets up what it needs on a fresh machine.
#   make book     build the book into _build/html
#   make test     unit tests + notebooks (nbval), CPU; CUDA tests run where a GPU is present
#   make nbtest   only the notebooks
#   make browser-test  build the book, open every page in headless Chromium (CI runs it)
#   make lab      JupyterLab on the notebooks
#   make bench    time every registered kernel (python -m quantgemm_kernels.bench)
# On a machine that already has the packages (a GPU box), `make test SETUP=` skips the venv.
VENV  ?= .venv
PY    ?= $(VENV)/bin/python
SETUP ?= $(VENV)/.installed
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))

.PHONY: book test unit nbtest lab bench clean setup
setup: $(SETUP)

$(VENV)/.installed: requirements.txt
	test -x $(VENV)/bin/python || python3 -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -r requirements.txt
	touch $@

unit: $(SETUP)
	$(PY) -m pytest -q tests

nbtest: $(SETUP)
	$(PY) -m pytest -q --nbval-lax --nbval-current-env --nbval-cell-timeout=1200 -p no:python notebooks

test: $(SETUP)
	$(PY) -m pytest -q tests
	$(PY) -m pytest -q --nbval-lax --nbval-current-env --nbval-cell-timeout=1200 -p no:python notebooks

book: $(SETUP)
	$(VENV)/bin/jupyter-book build --all -n -W --keep-going .

lab: $(SETUP)
	$(VENV)/bin/python -m pip install -q jupyterlab
	$(VENV)/bin/jupyter lab notebooks

# The built book in headless Chromium (tests_browser/). Chromium comes from the system
# (Debian: apt-get install chromium; or set CHROMIUM_PATH), never from `playwright install`.
.PHONY: browser-test
browser-test: book
	$(PY) -m pytest -q tests_browser

bench: $(SETUP)
	$(PY) -m quantgemm_kernels.bench

clean:
	rm -rf _build .pytest_cache
