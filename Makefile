# LaunchLab. `make lab` to learn, `make test` to test. PYTHON=python3 uses an environment you already
# have (for example an offline GPU machine) instead of creating .venv.
VENV ?= .venv
ifdef PYTHON
PY := $(PYTHON)
SETUP :=
else
PY := $(VENV)/bin/python
SETUP := $(VENV)/.installed
endif
export LAUNCHLAB_ROOT := $(CURDIR)
PYTEST := $(PY) -m pytest
NBVAL := --nbval-lax --nbval-cell-timeout=600 notebooks solutions
HAS_GPU = $(shell $(PY) -c "import launchlab.env as e; print(int(e.environment().has_gpu))" 2>/dev/null)
LAB_ARGS ?=
# JupyterLab refuses root unless told; containers often run as root.
ROOT_ARGS := $(if $(filter 0,$(shell id -u)),--allow-root)
PY_VERSION ?= 3.12
# Labs executed at once in the GPU tier: their stubs fail whatever the GPU is doing, so they may share it.
LAB_WORKERS ?= 4

.PHONY: lab test test-cpu test-gpu reference labs grade lint figures slides site wheelhouse clean

$(VENV)/.installed: pyproject.toml utils/pyproject.toml utils/bootstrap.sh utils/launchlab/tested_versions.toml \
  utils/jupyterlab_overrides.json
	utils/bootstrap.sh $(VENV)
	touch $@

# Opens on the start page: the syllabus, with links to every lecture, lab and solution.
# JupyterLab's news pop-up and update check are off in .venv (utils/jupyterlab_overrides.json, by bootstrap.sh).
# Saving a notebook keeps the kernel metadata the repository stores (launchlab/jupyter_hooks.py): opening one and
# letting autosave run changes nothing on disk.
lab: $(SETUP)
	$(PY) -m jupyter lab START_HERE.ipynb --ServerApp.root_dir=$(CURDIR) $(ROOT_ARGS) \
	  --ContentsManager.pre_save_hook=launchlab.jupyter_hooks.keep_course_metadata $(LAB_ARGS)

# Every test this machine can run: the CPU tier always, the GPU tier too when a CUDA GPU is present.
test: $(SETUP)
	$(MAKE) test-cpu PY=$(PY) SETUP=
	@if [ "$(HAS_GPU)" = "1" ]; then $(MAKE) test-gpu PY=$(PY) SETUP=; \
	else echo "no CUDA GPU here: the GPU tier (make test-gpu) was not run"; fi

lint: $(SETUP)
	$(PY) -m ruff check utils tests notebooks solutions labs

# The CPU tier: everything that needs no GPU; on a GPU machine too, its GPU cells are left to the GPU tier.
test-cpu: $(SETUP) lint
	$(PY) -m launchlab_tools.labs --check
	$(PY) -m launchlab_tools.start_page --check
	$(PY) -m launchlab_tools.slides --check
	LAUNCHLAB_TIER=cpu $(PYTEST) tests $(NBVAL) -m "not gpu"

# The GPU tier: the reference run executes every notebook and solution once, strictly (claims must hold,
# checkers must pass their solutions) and writes reports/gpu/; then the GPU tests that time something, one at a
# time, and in parallel the labs (stubs must fail their checkers), the GPU tests that time nothing (their
# exercises are declared untimed in the course model) and the no-answer tests (whose candidates share the GPU
# anyway). Prints what each part cost.
test-gpu: $(SETUP)
	@start=$$(date +%s); \
	$(PY) -m launchlab_tools.reference_run && $(PY) -m launchlab_tools.start_page && \
	ref=$$(date +%s) && echo "GPU tier: reference run $$(( ref - start )) s" && \
	LAUNCHLAB_STRICT=1 $(PYTEST) tests -m "gpu and not labs and not concurrent" --durations=15 && \
	timed=$$(date +%s) && echo "GPU tier: timed GPU tests $$(( timed - ref )) s" && \
	$(PYTEST) tests -m "gpu and (labs or concurrent)" -n $(LAB_WORKERS) --durations=10 && \
	echo "GPU tier: labs and untimed GPU tests $$(( $$(date +%s) - timed )) s"; \
	status=$$?; echo "GPU tier: $$(( $$(date +%s) - start )) s in all"; exit $$status

# The reference run writes only the notebooks it ran and this GPU's report; the start page shows its run times.
reference: $(SETUP)
	$(PY) -m launchlab_tools.reference_run $(NOTEBOOKS)
	$(PY) -m launchlab_tools.start_page

# Grade learners' labs, a verdict per exercise: make grade NOTEBOOKS="class/*/09_*.ipynb" GRADES=grades.json
grade: $(SETUP)
	$(PY) -m launchlab_tools.grade $(NOTEBOOKS) $(if $(GRADES),--json $(GRADES))

# Every figure on every GPU with a report, plus your runs/ files (or RUNS="a.json b.json"), into across_gpus/.
figures: $(SETUP)
	$(PY) -m launchlab_tools.figures across_gpus $(if $(RUNS),--run $(RUNS))

# Slides: every lecture's slide metadata (live in JupyterLab: open a lecture, Alt+R), and a static reveal.js
# deck per lecture from its stored outputs, in _build/slides/, with reveal.js and MathJax beside them (from
# npm, once), so that the folder presents with no network; every slide fits a 1280x720 screen.
slides: $(SETUP)
	$(PY) -m launchlab_tools.notebooks
	$(PY) -m launchlab_tools.slides --write
	$(PY) -m launchlab_tools.slides --build _build/slides --reveal _build/slides/offline

# labs/ from solutions/, and the start page and the README's syllabus table from the course model.
labs: $(SETUP)
	$(PY) -m launchlab_tools.labs
	$(PY) -m launchlab_tools.start_page

# The reading site in _build/html, from notebooks/ and solutions/ with their stored outputs, never executed;
# the table of contents is written from the notebooks on disk; any warning (a broken page) fails the build.
# Jupyter Book is pyproject's `site` extra, installed here on first use: learners and `make test` never need it.
site: $(SETUP)
	@$(PY) -c "import jupyter_book" 2>/dev/null || $(PY) -m pip install -q -e ".[site]"
	$(PY) -m launchlab_tools.notebooks
	$(PY) -m launchlab_tools.figures across_gpus --reference-only
	$(PY) -m launchlab_tools.guide instructors
	$(PY) -m launchlab_tools.site_toc _build/_toc.yml
	rm -rf _build/html _build/.doctrees _build/jupyter_execute
	$(PY) -c "from jupyter_book.cli.main import main; main()" build . --config site/_config.yml \
	  --toc _build/_toc.yml --path-output . --warningiserror --keep-going
	@echo "the site is in _build/html (open index.html)"

# Wheels an offline GPU machine needs for the tiers when its Python already has torch, CuPy and matplotlib.
wheelhouse:
	python3 -m pip download -q --only-binary=:all: --python-version $(PY_VERSION) --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	  --platform any -d .whl nbval nbclient nbformat ipykernel pytest-timeout pytest-xdist ruff pyyaml
	cd .whl && rm -f numpy-* pytest-[0-9]* pluggy-* iniconfig-* packaging-* pygments-* psutil-* \
	  python_dateutil-* six-* typing_extensions-* attrs-* coverage-*
	@echo "$$(ls .whl | wc -l) wheels in .whl"

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
