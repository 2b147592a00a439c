# llamafleet: the two commands of the README, and their parts.
#   make site   provision the local test host with the whole site (CPU build, tiny model)
#   make test   lint + unit tests + Molecule scenarios on real systemd test hosts + fleet-sim at N = 2
#   make fleet-sim SIZES=5,10,25,50   time playbooks/rollout.yml on N test hosts (docs/scale.md)
SHELL := /bin/bash
.ONESHELL:
.SHELLFLAGS := -euo pipefail -c

export LLAMAFLEET_CACHE ?= /var/cache/llamafleet
export LLAMAFLEET_TESTHOSTS ?= /var/tmp/llamafleet-testhosts
export LLAMAFLEET_NET ?= 10.131.7
export PIP_CACHE_DIR ?= $(LLAMAFLEET_CACHE)/pip
export ANSIBLE_FORCE_COLOR ?= 0

VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
TESTHOST := testbed/testhost.sh

.PHONY: help bootstrap site site-down test lint unit molecule bench clean fleet-sim fleet-sim-ci

help:
	@sed -n '2,4p' Makefile

# Python tools on the controller: Ansible, Molecule, testinfra, linters and the llamafleet package.
$(VENV)/.stamp: validator/pyproject.toml requirements-dev.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-dev.txt
	$(BIN)/pip install --quiet -e './validator[test]'
	touch $@

bootstrap: $(VENV)/.stamp
	$(TESTHOST) deps

# ---------------------------------------------------------------- main job
site: bootstrap
	$(BIN)/ansible-playbook testbed/local.yml
	$(BIN)/ansible-playbook site.yml

site-down:
	$(TESTHOST) down lf-local || true
	$(TESTHOST) cleanup || true

# ---------------------------------------------------------------- tests
test: bootstrap lint unit molecule fleet-sim-ci

lint: $(VENV)/.stamp
	# the Python of the roles (modules, plugins), the playbooks and the test tooling too
	(cd validator && $(BIN)/ruff check src tests tools ../roles ../playbooks ../testbed \
	  && $(BIN)/ruff format --check src tests tools ../roles ../playbooks ../testbed)
	# mypy: the same files (validator/pyproject.toml names them); the rule pages are generated
	(cd validator && $(BIN)/mypy && $(BIN)/python tools/gen_docs.py --check)
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint --offline

unit: $(VENV)/.stamp
	# promtool and mtail for the monitoring role's rule and mtail tests (from the Debian packages)
	testbed/unit-tools.sh >/dev/null
	(cd validator && $(BIN)/python -m pytest -q -p no:cacheprovider)

molecule: bootstrap
	$(BIN)/molecule test -s default
	$(BIN)/molecule test -s claude
	$(BIN)/molecule test -s cuda
	$(BIN)/molecule test -s fleet
	$(BIN)/molecule test -s pool

# The rollout at scale (docs/scale.md): N test hosts per size, each variant measured on fresh hosts;
# results, logs, table.md and fleet-sim.png in .cache/fleet-sim. SIZES=5 (the default) fits CI.
SIZES ?= 5
VARIANTS ?= baseline
fleet-sim: bootstrap
	$(BIN)/pip install --quiet matplotlib || echo "fleet-sim: no matplotlib, the table only"
	testbed/fleet-sim --sizes $(SIZES) $(foreach v,$(VARIANTS),--variant $(v))

# The same script at N = 2, in `make test`, so that it cannot rot (a failed run or a re-run that
# changed a host fails it); its figures are not a benchmark.
fleet-sim-ci: bootstrap
	$(BIN)/pip install --quiet matplotlib || echo "fleet-sim: no matplotlib, the table only"
	testbed/fleet-sim --sizes 2 --variant baseline --out .cache/fleet-sim-ci

bench: $(VENV)/.stamp
	$(BIN)/python validator/tools/bench.py 1000

clean: site-down
	rm -rf $(VENV)
