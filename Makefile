# chakra-collectives: every target sets itself up (a virtualenv in .venv) on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install test demo bench samples schemas clean

install: $(STAMP)

# The stamp records the checkout the editable install points at: a venv copied or moved with
# the checkout is reinstalled, so tests always import this checkout's files.
$(STAMP): pyproject.toml $(if $(filter $(CURDIR),$(shell cat $(STAMP) 2>/dev/null)),,FORCE)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	# bytecode compiled once, as pip does for a non-editable install: where the environment
	# forbids writing it at import (PYTHONDONTWRITEBYTECODE), every command would recompile ~80
	# modules (about 0.4 s of a small synth)
	$(BIN)/python -m compileall -q chakra_collectives > /dev/null
	echo $(CURDIR) > $(STAMP)

FORCE:

test: install  ## run the test suite (what CI runs)
	$(BIN)/python -m pytest

demo: install  ## the main job on a built-in default, with a readable summary
	$(BIN)/chakra-coll demo

bench: install  ## performance benchmarks (prints medians and ratios)
	$(BIN)/python bench/run.py

samples: install  ## regenerate sample_traces/ (a test checks they are current)
	$(BIN)/python -m chakra_collectives.samples sample_traces

schemas: install  ## regenerate schemas/et-attributes.json from the code
	$(BIN)/python -c "from chakra_collectives.converters.chakra_et.attributes import schema_document as d; print(d(), end='')" > schemas/et-attributes.json

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache demo-out
