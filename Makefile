# The README's two commands are `make demo` and `make test`; both create .venv and install what
# they need (Debian's redis-server included) on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# checkov (the Terraform checks of tests/terraform) pins boto3 and cannot share .venv: it has a
# virtualenv of its own, made once.
CHECKOV_VERSION := 3.3.30
CHECKOV_VENV := $(VENV)/tools/checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed-$(CHECKOV_VERSION)

.PHONY: demo test stubs bench validate clean system-deps constraints

# Everything (every component, cloud SDK, the simulator and the demo, the test and dev tools) at the
# exact versions of constraints.txt.
$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[all,test,dev]' -c constraints.txt
	@touch $(STAMP)

$(CHECKOV_STAMP):
	@test -x $(CHECKOV_VENV)/bin/python || $(PY) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install --quiet checkov==$(CHECKOV_VERSION)
	@touch $(CHECKOV_STAMP)

# Re-resolve the full set from pyproject.toml alone (a fresh virtualenv, constraints.txt not used)
# and write its exact versions to constraints.txt, keeping the file's header.
CONSTRAINTS_VENV := build/constraints-venv
constraints:
	rm -rf $(CONSTRAINTS_VENV)
	$(PY) -m venv $(CONSTRAINTS_VENV)
	$(CONSTRAINTS_VENV)/bin/pip install --quiet --upgrade pip
	$(CONSTRAINTS_VENV)/bin/pip install --quiet '.[all,test,dev]'
	{ sed -n '/^#/p;/^[^#]/q' constraints.txt; $(CONSTRAINTS_VENV)/bin/pip freeze --exclude meridian; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf $(CONSTRAINTS_VENV)
	@echo "constraints.txt refreshed: review 'git diff constraints.txt', then run make test"

# Debian packages the demo and the tests use: redis-server (state, HA), redis-sentinel (Redis HA
# tests), chromium (the dashboard's browser test), kubectl (its kustomize renders deploy/kubernetes
# for the manifest tests).
DEBIAN_DEPS := redis-server:redis-server redis-sentinel:redis-sentinel chromium:chromium kubectl:kubectl

system-deps:
	@missing=""; for dep in $(DEBIAN_DEPS); do cmd=$${dep%%:*}; pkg=$${dep#*:}; \
	  command -v $$cmd >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) >/dev/null || \
	  { echo "could not install$$missing: run 'apt-get install$$missing' as root"; exit 1; }; fi

validate: $(STAMP)
	$(BIN)/meridian validate examples/*.yaml

demo: $(STAMP) system-deps
	@if $(BIN)/meridian --help 2>/dev/null | grep -q ' demo '; then $(BIN)/meridian demo; \
	else $(BIN)/meridian validate examples/*.yaml; fi

test: $(STAMP) $(CHECKOV_STAMP) system-deps
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=25 -rfEs

stubs: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=. --grpc_python_out=. --pyi_out=. proto/meridian/v1/*.proto

bench: $(STAMP) system-deps
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
