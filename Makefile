# llamafleet: the two commands of the README, and their parts.
#   make site   provision the local test host with the whole site (CPU build, tiny model)
#   make test   lint + unit tests + Molecule scenarios on real systemd test hosts + fleet-sim at N = 2
#   make test-quick   lint + unit tests + the default scenario (the inner loop)
#   make fleet-sim SIZES=5,10,25,50   time playbooks/rollout.yml on N test hosts (docs/scale.md)
#   make claude-code-pins VERSION=x.y.z   pin another Claude Code release, re-record its request
SHELL := /bin/bash
.ONESHELL:
.SHELLFLAGS := -euo pipefail -c

export LLAMAFLEET_CACHE ?= /var/cache/llamafleet
export LLAMAFLEET_TESTHOSTS ?= /var/tmp/llamafleet-testhosts
export LLAMAFLEET_NET ?= 10.131.7
export PIP_CACHE_DIR ?= $(LLAMAFLEET_CACHE)/pip
export ANSIBLE_FORCE_COLOR ?= 0
# the shipped llama.cpp builds of one test suite (index.json + tarballs, as rollout_build_cache):
# the default scenario compiles the fork and ships it here, every later scenario installs it
export LLAMAFLEET_BUILDS ?= $(LLAMAFLEET_TESTHOSTS)/builds

VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
TESTHOST := testbed/testhost.sh

.PHONY: help bootstrap collection sanity site site-down test test-quick test-phases lint unit molecule bench clean \
	fleet-sim fleet-sim-ci claude-code-pins images ph-lint ph-unit ph-images ph-default ph-cuda ph-claude ph-pool \
	ph-fleet ph-fleet-sim ph-debian13

help:
	@sed -n '2,6p' Makefile

# Python tools on the controller: Ansible, Molecule, testinfra, linters and the llamafleet package.
$(VENV)/.stamp: validator/pyproject.toml requirements-dev.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-dev.txt
	$(BIN)/pip install --quiet -e './validator[test]'
	touch $@

# This checkout installed as the llamafleet.fleet collection (ansible.cfg's collections_path), the
# way a team installs it: again whenever one of its files changes.
COLLECTION_DIR := .ansible/collections/ansible_collections/llamafleet/fleet
COLLECTION_FILES := $(shell git ls-files galaxy.yml meta roles playbooks plugins README.md 2>/dev/null)
$(COLLECTION_DIR)/MANIFEST.json: $(VENV)/.stamp $(COLLECTION_FILES)
	$(BIN)/ansible-galaxy collection install --force --no-deps -p .ansible/collections . >/dev/null
	touch $@

collection: $(COLLECTION_DIR)/MANIFEST.json

bootstrap: $(VENV)/.stamp collection
	$(TESTHOST) deps

# ---------------------------------------------------------------- main job
# the site, then (in the same run, so it sees the servers' facts) one real Claude Code session
# through it and the summary (llamafleet.fleet.smoke)
site: bootstrap
	$(BIN)/ansible-playbook testbed/local.yml
	$(BIN)/ansible-playbook site.yml llamafleet.fleet.smoke

site-down:
	$(TESTHOST) down lf-local || true
	$(TESTHOST) cleanup || true

# Another Claude Code release for the claude_code role: its integrity pins from npm's registry
# (npm's configured one, or REGISTRY=URL), the gates' request re-recorded from that CLI, and what
# changed in the request's shape (validator/tools/claude_code_pins.py).
claude-code-pins: $(VENV)/.stamp
	test -n "$(VERSION)" || { echo "usage: make claude-code-pins VERSION=x.y.z [REGISTRY=URL]" >&2; exit 2; }
	$(BIN)/python validator/tools/claude_code_pins.py "$(VERSION)" $(if $(REGISTRY),--registry "$(REGISTRY)")

# ---------------------------------------------------------------- tests
# `make test` runs its phases two at a time (two cores; make -j2), and prints at its end a table of
# every phase's wall time beside its budget; a phase over its budget is named.
# make starts, whenever a core is free, the first phase of test-phases' list that can start (the
# longest work first); what each phase waits for is below the list, with the reason for its order.
# Budgets: minutes on this machine kind (2 cores, 24 GiB), cold cache / warm cache. The suite's
# budget is 45 cold / 30 warm; CI runs everything, always.
SUITE_BUDGET := 45 30
# measured from fresh clones, this order of phases: warm 35:33 (1a06235) and 29:22 (aea9760, a
# faster hour); empty cache 55:08 (e51d42a, default's cold compile 28:02) and 44:22 (80783cf, the
# faster hour, 20:06). The phases over their budgets are named in docs/scale.md ("The test suite's CPU")
BUDGET_bootstrap := 3 1
BUDGET_lint := 3 1
BUDGET_unit := 5 3
BUDGET_images := 5 1
BUDGET_default := 14 7
BUDGET_cuda := 6 3
BUDGET_claude := 14 12
BUDGET_pool := 19 17
BUDGET_fleet := 8 6
BUDGET_fleet-sim := 5 3
BUDGET_debian13 := 16 10
PHASE := testbed/phase
# Scenarios that run at once each get their own network (TEST_NET.N, N = 20..26: apart from
# LLAMAFLEET_NET, which `make site` and a scenario run by hand use), bridge and state directory, so
# their hosts, HTTP servers and clean-ups never meet.
TEST_NET ?= 10.131
# $(call scenario,NAME,N): molecule test -s NAME on TEST_NET.N, timed as phase NAME
scenario = LLAMAFLEET_NET=$(TEST_NET).$(2) LLAMAFLEET_BRIDGE=lfbr$(2) \
	LLAMAFLEET_TESTHOSTS=$(LLAMAFLEET_TESTHOSTS)/$(1) $(PHASE) run $(1) $(BUDGET_$(1)) -- $(BIN)/molecule test -s $(1)

test:
	$(PHASE) reset
	$(PHASE) run bootstrap $(BUDGET_bootstrap) -- $(MAKE) --no-print-directory bootstrap
	# the suite's shipped builds start empty: the default scenario compiles the one build
	rm -rf "$(LLAMAFLEET_BUILDS)"
	# a failed phase does not stop the others (the rest still run); the report fails the suite
	rc=0; LLAMAFLEET_PHASE_KEEP_GOING=1 $(MAKE) --no-print-directory -j2 test-phases || rc=$$?
	$(PHASE) report $(SUITE_BUDGET) || rc=1
	exit $$rc

# the inner loop: lint, unit tests and the default scenario
test-quick:
	$(PHASE) reset
	$(PHASE) run bootstrap $(BUDGET_bootstrap) -- $(MAKE) --no-print-directory bootstrap
	rm -rf "$(LLAMAFLEET_BUILDS)"
	rc=0; $(MAKE) --no-print-directory -j2 ph-unit ph-default || rc=$$?
	$(PHASE) report $(SUITE_BUDGET) || rc=1
	exit $$rc

test-phases: ph-images ph-lint ph-default ph-unit ph-pool ph-claude ph-cuda ph-fleet ph-debian13 \
	ph-fleet-sim

# pool, claude, fleet and fleet-sim install the build default ships; lint, unit, cuda and debian13
# run one after the other beside default. They are chained because make gives a free core to the
# first phase of the list that was ready when it last went through it: unit, ready from the start,
# took the core meant for default when the images came in seconds from a warm cache. (With an empty
# cache debian13 then compiles beside default's compile, not after claude and fleet.)
ph-default: ph-images
ph-unit: ph-lint
ph-cuda: ph-unit ph-images
ph-debian13: ph-cuda ph-images
ph-pool ph-claude ph-fleet ph-fleet-sim: ph-default

ph-lint:
	$(PHASE) run lint $(BUDGET_lint) -- $(MAKE) --no-print-directory lint
ph-unit:
	$(PHASE) run unit $(BUDGET_unit) -- $(MAKE) --no-print-directory unit
ph-images:
	$(PHASE) run images $(BUDGET_images) -- $(MAKE) --no-print-directory images
ph-default:
	$(call scenario,default,20)
ph-claude:
	$(call scenario,claude,21)
ph-cuda:
	$(call scenario,cuda,22)
ph-fleet:
	$(call scenario,fleet,23)
ph-pool:
	$(call scenario,pool,24)
ph-debian13:
	$(call scenario,debian13,26)
ph-fleet-sim:
	LLAMAFLEET_NET=$(TEST_NET).25 LLAMAFLEET_BRIDGE=lfbr25 LLAMAFLEET_TESTHOSTS=$(LLAMAFLEET_TESTHOSTS)/fleet-sim \
	  $(PHASE) run fleet-sim $(BUDGET_fleet-sim) -- $(MAKE) --no-print-directory fleet-sim-ci

lint: $(VENV)/.stamp
	# the Python of the roles (modules, plugins), the playbooks and the test tooling too
	(cd validator && $(BIN)/ruff check src tests tools ../roles ../plugins ../testbed ../tests \
	  && $(BIN)/ruff format --check src tests tools ../roles ../plugins ../testbed ../tests)
	# mypy: the same files (validator/pyproject.toml names them); the rule pages are generated
	(cd validator && $(BIN)/mypy && $(BIN)/python tools/gen_docs.py --check \
	  && $(BIN)/python tools/gen_module_utils.py --check)
	$(BIN)/yamllint -s .
	# a home of its own: ansible-lint reads ~/.ansible/collections before this checkout's copy, and a
	# collection installed there earlier (another llamafleet) would hide this one's new modules
	# (one shell per recipe, .ONESHELL: no `exit` here, or the sanity line below never runs)
	h=$$(mktemp -d); rc=0; HOME=$$h $(BIN)/ansible-lint --offline || rc=$$?; rm -rf "$$h"
	test $$rc -eq 0
	$(MAKE) --no-print-directory sanity

# ansible-test sanity and units on an installed copy of the collection (ansible-test wants it under
# ansible_collections/NAMESPACE/NAME): the sanity tests that need no virtual environment of their
# own, and the unit tests of tests/unit (the plugins' module_utils, by FQCN; pytest-xdist runs them).
# The others (ansible-doc, import, pylint, validate-modules, yamllint, ...) first download
# ansible-test's pip bootstrap script from the internet; tests/sanity/README.md says which, and
# validator/tests/test_collection.py reads every module's documentation through ansible-doc.
SANITY_TESTS := action-plugin-docs compile empty-init line-endings no-assert no-get-exception \
	no-illegal-filenames no-smart-quotes replace-urlopen shebang symlinks use-argspec-type-path \
	use-compat-six
sanity: collection
	# (not below a directory whose name starts with a dot: ansible-test then skips every file)
	d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT
	$(BIN)/ansible-galaxy collection install --force --no-deps -p "$$d" . >/dev/null 2>&1
	py=$$($(BIN)/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
	cd "$$d/ansible_collections/llamafleet/fleet"
	$(BIN)/ansible-test sanity --local --python "$$py" $(foreach t,$(SANITY_TESTS),--test $(t))
	$(BIN)/ansible-test units --local --python "$$py"

unit: $(VENV)/.stamp
	# promtool and mtail for the monitoring role's rule and mtail tests (from the Debian packages)
	testbed/unit-tools.sh >/dev/null
	(cd validator && $(BIN)/python -m pytest -q -p no:cacheprovider)

# the test hosts' root images (debootstrap once per suite, cached), built beside lint and unit
images:
	$(TESTHOST) deps
	$(TESTHOST) rootfs bookworm >/dev/null
	$(TESTHOST) rootfs trixie >/dev/null

# every scenario, one after the other (make test runs them two at a time)
molecule: bootstrap
	rm -rf "$(LLAMAFLEET_BUILDS)"
	$(call scenario,default,20)
	$(call scenario,cuda,22)
	$(call scenario,claude,21)
	$(call scenario,pool,24)
	$(call scenario,fleet,23)

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
	# the tool itself at two hosts (first rollout, re-run, good rollout, its table and plot), without
	# the inference requests (the smoke request and the prompt-cache gate: about 30 CPU seconds a
	# host on the fork's turbo3 values, on these two cores): the default, fleet and pool scenarios
	# send them
	testbed/fleet-sim --sizes 2 --out .cache/fleet-sim-ci \
	  --variant 'baseline:e.llama_server_smoke_test=false,e.rollout_cache_gate=false'

bench: $(VENV)/.stamp
	$(BIN)/python validator/tools/bench.py 1000

clean: site-down
	rm -rf $(VENV)
