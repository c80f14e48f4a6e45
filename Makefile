# glm5-deploy. The two commands that matter: `make deploy` (the main job) and `make test` (the test command).
# Everything a fresh machine lacks is installed here: apt packages, the control-node venv, the lab image.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# The control node's interpreter: the distribution's python3.11 when the machine has one, else the first on PATH.
# Debian builds it with profile-guided and link-time optimization into a static binary; a source build without
# --enable-optimizations (pyenv's default, as this project's machines have first on PATH) ran the same
# ansible-playbook runs with 13-22 % more CPU (docs/journal/measurements.md, ninth session): every
# ansible-playbook, molecule, pytest and ansible-lint of make test runs on it.
PYTHON ?= $(or $(wildcard /usr/bin/python3.11),python3.11)
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
export GLM5_CACHE ?= $(HOME)/.cache/glm5-deploy
export CONTAINERS_CONF := $(CURDIR)/lab/podman/containers.conf
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# The machine's own PATH, without the venv's bin: what the background builders of make test run with while the
# venv is being made (its python3.11 has no pip until its install ends).
HOST_PATH := $(PATH)
export PATH := $(BIN):$(PATH)
export ANSIBLE_FORCE_COLOR ?= 0
# The recipes' Python writes byte-code (into .venv, the cache's venvs and the project's ignored __pycache__)
# even where the environment says not to, as container images often do (PYTHONDONTWRITEBYTECODE=1): else every
# ansible-playbook, molecule, pytest and ansible-lint start compiles all it imports again (make lint: 68.5
# CPU-s against 45, docs/journal/measurements.md). Python reads an empty value as unset.
export PYTHONDONTWRITEBYTECODE :=

APT_PACKAGES := podman runc debootstrap python3-venv dpkg-dev gnupg openssh-client openssl nginx
PLAYBOOK := $(BIN)/ansible-playbook
# The lab's size: GPU nodes in the lab fleet (2 is inventory/lab; other sizes: lab/bin/lab-inventory N).
LAB_NODES ?= 2
LAB_INVENTORY = $(shell lab/bin/lab-inventory $(LAB_NODES))
# Molecule scenarios that make their own containers: these one after the other, and the longest beside them
# (make molecule). molecule/validate, rolling and rollback run on the lab fleet instead.
CONTAINER_SCENARIOS := driver gpu-matrix checkpoint
CONTAINER_SCENARIO_BESIDE := runtime

COLLECTION_DIR := $(CURDIR)/build/collection

.PHONY: help deps venv collection collection-install ee lint-collection image lab-artifacts lab-artifacts-locked lab-artifacts-image lab-artifacts-engine lab-up lab-down deploy test checks checks-beside lint sanity unit parser refusals integration integration-beside molecule bench docs changelog clean clean-cache

help: ## Show the targets.
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

deps: ## Install the apt packages the lab needs (podman, runc, debootstrap, ssh, openssl, nginx), when missing.
	@# Installed means dpkg's "install ok installed": `dpkg -s` also succeeds for a package removed but not purged
	@# (its configuration files left, status "deinstall ok config-files"), whose commands are gone.
	@missing=$$(for p in $(APT_PACKAGES); do \
	  [ "$$(dpkg-query -W -f='$${Status}' $$p 2>/dev/null)" = "install ok installed" ] || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "apt: installing $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@# Package lists that know Debian's prometheus, before make test's halves start: lint's promtool and the
	@# artifacts' debian-extra both read it, and two apt-get updates at once would fight over apt's lock.
	@apt-cache show prometheus >/dev/null 2>&1 || { echo "apt: updating the package lists"; apt-get update -qq; }

venv: $(VENV)/.installed ## Install the pinned control-node toolchain into .venv.

# --no-compile: pip would byte-compile all 20,000 modules (the ansible bundle's collections are most of them),
# 24 of the install's 45 CPU-s, on the path of both halves of make test; Python compiles the 700-odd that the
# tools import at their first import instead, into the venv's own __pycache__ (see PYTHONDONTWRITEBYTECODE).
$(VENV)/.installed: requirements/control.txt requirements/control.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --no-compile -r requirements/control.txt -c requirements/control.lock
	touch $@

collection: venv ## Build the installable collection glm5.deploy into build/collection/ (glm5-deploy-<version>.tar.gz).
	rm -rf $(COLLECTION_DIR) && mkdir -p $(COLLECTION_DIR)
	@# The repository root is the collection root; galaxy.yml's build_ignore leaves the lab and the links out.
	$(BIN)/ansible-galaxy collection build . --output-path $(COLLECTION_DIR)

ee: collection ## The execution environment's build context (build/ee/context; then ansible-builder build).
	rm -rf build/ee && mkdir -p build/ee
	cp $(COLLECTION_DIR)/glm5-deploy-*.tar.gz build/ee/glm5-deploy.tar.gz
	$(BIN)/ansible-builder create -f execution-environment.yml -c build/ee/context

image: deps ## Build the lab's systemd image when it is missing (cached in ~/.cache/glm5-deploy).
	lab/bin/build-image

lab-artifacts: deps venv ## Build the lab's cached artifacts when missing: ssh key, apt repos, wheelhouse, tiny model, HF mirror.
	@mkdir -p $(GLM5_CACHE)
	flock $(GLM5_CACHE)/.lab-artifacts.lock $(MAKE) --no-print-directory lab-artifacts-locked

# One build at a time: both halves of make test need the artifacts, and the second waits for the first.
# Two chains side by side, each mostly one process on one core and partly a download: the image (debootstrap)
# and the router's wheelhouse; the engine's wheelhouse, its venv, the tiny model trained in it and the mirror
# that serves it. On a fresh machine 4 min 53 s one after the other, the longer chain about 3 minutes
# (docs/journal/measurements.md). Each builder prints its own progress lines on stderr, prefixed with its name.
lab-artifacts-locked:
	$(MAKE) --no-print-directory -j2 lab-artifacts-image lab-artifacts-engine

lab-artifacts-image: image
	lab/bin/build-wheelhouse smg-1.13.0 >/dev/null

lab-artifacts-engine:
	lab/bin/lab-ssh-key
	lab/bin/lab-tls >/dev/null
	lab/bin/build-apt-repo
	lab/bin/build-wheelhouse >/dev/null
	lab/bin/build-hf-mirror >/dev/null
	lab/bin/build-debian-extra >/dev/null

lab-up: lab-artifacts ## Bring the lab fleet up, LAB_NODES GPU nodes (default 2) and lab-gateway (idempotent).
	$(PLAYBOOK) -i $(LAB_INVENTORY) lab/playbooks/lab.yml

lab-down: venv ## Remove the lab's containers, network and volumes (and nothing else).
	$(PLAYBOOK) lab/playbooks/lab-down.yml

deploy: lab-up ## The main job: ansible-playbook site.yml against the lab (LAB_NODES GPU nodes, default 2).
	$(PLAYBOOK) -i $(LAB_INVENTORY) site.yml

test: ## The test command: integration (the lab fleet) beside checks (lint, unit, parser, refusals, molecule's containers).
	@# The artifacts' longer chain (the engine's wheelhouse, 3.2 GB from PyPI; its venv; the tiny model trained in
	@# it) needs neither the apt packages nor the venv (python3.11's own pip and venv): on a fresh machine it
	@# starts now, in the background, beside apt's downloads and the venv's install, and so does the router's
	@# wheelhouse. lab-artifacts asks for each again: each builder waits for a build under way (its lock), and
	@# builds what a failed one left missing, with the error.
	export PATH='$(HOST_PATH)'; \
	  { lab/bin/build-wheelhouse && { lab/bin/build-wheelhouse smg-1.13.0 & lab/bin/build-tiny-model; wait; }; } >/dev/null &
	@# apt's downloads beside pip's install: neither needs the other (the venv is python3.11's own). The lab's
	@# image needs apt's debootstrap only: it builds as soon as apt is done, beside the venv's install.
	$(MAKE) --no-print-directory -j3 --output-sync=target deps venv image
	$(MAKE) --no-print-directory -j2 --output-sync=target integration-beside checks-beside

# The lab fleet's suite is the longest: it starts at once (integration-beside: lab.yml, its artifacts as it
# needs them), and the checks run beside it, one after the other: lint and unit need no artifact, so on a fresh
# machine they run while the artifacts build; parser needs one, the engine's venv, which the background chain
# builds first; refusals and the scenarios with their own containers wait for all of them (lab-artifacts). The
# machine's cores are what both halves share, so the checks run in the background of the CPU (lab/bin/background:
# nice 10 in a low-weight cpu cgroup; their containers have a low weight of their own): they fill the lab suite's
# waits instead of slowing the half that decides how long make test takes.
checks: lint sanity unit parser refusals molecule ## lint, sanity, unit, parser, refusals, then the container scenarios (beside integration in make test).

checks-beside:
	lab/bin/background $(MAKE) --no-print-directory -j1 checks

lint: venv ## ansible-lint (production profile), yamllint, ruff; promtool on the alert rules and their unit tests.
	$(BIN)/yamllint --strict .
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/ansible-lint
	$(MAKE) --no-print-directory lint-collection
	@# The alert rules are a template (thresholds, runbook links): rendered with the role's defaults into
	@# build/monitoring beside their unit tests, then checked and tested there.
	$(PLAYBOOK) roles/sglang_monitoring/tests/render-rules.yml
	lab/bin/promtool check rules build/monitoring/glm5-rules.yml
	lab/bin/promtool test rules build/monitoring/glm5-rules.test.yml

# The artifact installed as a user's project installs it: into an empty collections path,
# $(COLLECTION_DIR)/installed, with a configuration of its own ($(COLLECTION_DIR)/user/ansible.cfg), so the
# repository's collections/ is not found instead. The lab's tests install it the same way (tests/integration).
collection-install: collection
	rm -rf $(COLLECTION_DIR)/installed $(COLLECTION_DIR)/user && mkdir -p $(COLLECTION_DIR)/user
	printf '[defaults]\ncollections_path = %s\n' $(COLLECTION_DIR)/installed > $(COLLECTION_DIR)/user/ansible.cfg
	ANSIBLE_CONFIG=$(COLLECTION_DIR)/user/ansible.cfg $(BIN)/ansible-galaxy collection install \
	  $(COLLECTION_DIR)/glm5-deploy-*.tar.gz -p $(COLLECTION_DIR)/installed

# The installed artifact linted there: what Galaxy and Automation Hub would lint. With a configuration of its own:
# run inside this repository, ansible-lint would take the repository's .ansible-lint, whose exclude_paths leave
# roles/ and playbooks/ to this target, and lint neither.
lint-collection: collection-install
	printf 'profile: production\noffline: true\nexclude_paths:\n  - plugins/data/\n' > $(COLLECTION_DIR)/user/ansible-lint.yml
	cd $(COLLECTION_DIR)/installed/ansible_collections/glm5/deploy && \
	  ANSIBLE_CONFIG=$(COLLECTION_DIR)/user/ansible.cfg $(BIN)/ansible-lint -c $(COLLECTION_DIR)/user/ansible-lint.yml

# ansible-test sanity on the built artifact, installed outside the work tree, from a venv of its own at
# requirements/control.lock's ansible-core pin (lab/bin/ansible-test-sanity: the failures and one summary line).
sanity: collection ## ansible-test sanity (ansible-core's pin, Python 3.11) on the collection's artifact.
	lab/bin/ansible-test-sanity $(COLLECTION_DIR)/glm5-deploy-*.tar.gz

# The tests that assert seconds (marker timing: the guard's reactions, at 128 replicas too, and the load
# generator's pace) run at the machine's ordinary CPU weight (lab/bin/foreground): in make test the checks half
# runs in the background of the CPU, where a starved runner missed the promise's seconds, not the guard.
unit: venv ## pytest: unit tests of plugins/ (python_plugins/) and the lab stand-ins.
	$(BIN)/python -m pytest tests/unit -q -m 'not timing'
	lab/bin/foreground $(BIN)/python -m pytest tests/unit -q -m timing

# Each lane's sglang in a small venv over the lab engine's (torch's 6 GB once): lab/bin/build-engine-venv builds
# that when missing, under a lock, so a parser check beside the lab's artifacts waits for the same build.
parser: venv ## pytest: rendered flags against each lane's real sglang parser (venvs cached in ~/.cache).
	$(BIN)/python -m pytest tests/parser -q

# refusals needs the artifacts, not the lab: the lab inventory's values read the HF mirror's revisions.
refusals: lab-artifacts ## pytest: the bad inputs the inputs play refuses on the controller (site.yml at -vvv, no lab host needed).
	$(BIN)/python -m pytest tests/integration -q -m controller

# The lab fleet's suite, after the fleet is up: molecule default, the lab pytest, validate, rolling, rollback.
define INTEGRATION_SUITE
time $(BIN)/molecule test -s default
time $(BIN)/python -m pytest tests/integration -q -m 'not controller and not bench' --durations=25
time $(BIN)/molecule test -s validate
time $(BIN)/molecule test -s rolling
time $(BIN)/molecule test -s rollback
endef

integration: lab-up ## On the lab fleet: molecule default (deploy + idempotence), pytest via ansible-runner, validate, rolling, rollback.
	$(INTEGRATION_SUITE)

# make test's lab half: lab.yml at once, without lab-artifacts' two chains first. Each of its steps builds, or
# waits for (the builders' locks), the artifact it needs: the image and the apt repository when the containers
# start, the model and the mirror when the mirror starts. The engine's chain, the longer one, is building in
# the background meanwhile (make test), so the containers come up while the tiny model trains.
integration-beside: venv
	$(PLAYBOOK) -i $(LAB_INVENTORY) lab/playbooks/lab.yml
	$(INTEGRATION_SUITE)

# The longest container scenario (runtime: two releases installed, by one pip process each) runs beside the
# others, which run one after the other: each spends much of its time on one process (pip, a container's boot),
# so the two lines fill both cores where one left a core idle. Its output is shown when it ends, and kept in
# build/molecule-<scenario>.log.
molecule: lab-artifacts ## molecule test for each container scenario (validate, rolling and rollback run with integration, on the lab).
	image=$$(lab/bin/build-image --print-name); log=build/molecule-$(CONTAINER_SCENARIO_BESIDE).log; status=0; \
	mkdir -p build; \
	{ time GLM5_LAB_IMAGE=$$image $(BIN)/molecule test -s $(CONTAINER_SCENARIO_BESIDE); } >"$$log" 2>&1 & beside=$$!; \
	for scenario in $(CONTAINER_SCENARIOS); do \
	  time GLM5_LAB_IMAGE=$$image $(BIN)/molecule test -s $$scenario || { status=1; break; }; \
	done; \
	wait $$beside || status=1; cat "$$log"; exit $$status

bench: lab-artifacts ## The lab performance suite: measure P1-P5 and rewrite docs/benchmarks.md (BENCH_FIGURES=P1,P3 for some).
	$(BIN)/python lab/bench/suite.py $(if $(BENCH_FIGURES),--figures $(BENCH_FIGURES))

docs: venv ## Rewrite the variable tables of each role's README from its meta/argument_specs.yml.
	$(BIN)/python docs/role_readme.py

changelog: venv ## Release VERSION: the fragments in changelogs/fragments/ become its section of CHANGELOG.md.
	@test -n "$(VERSION)" || { echo "usage: make changelog VERSION=x.y.z"; exit 2; }
	$(BIN)/antsibull-changelog release --version $(VERSION)

clean: lab-down ## Take the lab down and remove the venv.
	rm -rf $(VENV)

clean-cache: ## Remove the cached artifacts (image tarballs, wheelhouse) under ~/.cache/glm5-deploy.
	rm -rf $(GLM5_CACHE)
