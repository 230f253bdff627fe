# Two commands do everything: `make demo` (a local cluster to play with) and `make test`.
# Everything else is a step of those two.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CLUSTER_DIR ?= .cluster
KUBECTL = KUBECONFIG=$(CLUSTER_DIR)/kubeconfig $(CLUSTER_DIR)/bin/kubectl
# Extra pytest arguments, e.g. `make test PYTEST_ARGS="-k podgroup -x"`.
PYTEST_ARGS ?=

.PHONY: help setup binaries lint format test test-release test-unit fuzz bench bench-scheduler-perf bench-victims bench-victims-gpus bench-curve bench-xl simcheck etacheck chaos soak oracle clients cluster-up cluster-down demo e2e-kind clean

help:
	@echo "make demo          start the local control plane with fake GPU nodes, and say how to use it"
	@echo "make test          lint, then run every test (starts and stops its own control plane)"
	@echo "make test-release  the API-facing e2e tests on another Kubernetes release (RELEASE=1.36)"
	@echo "make lint          ruff and import-linter"
	@echo "make cluster-up    start the local control plane in $(CLUSTER_DIR)/"
	@echo "make cluster-down  stop it and remove its state"
	@echo "make fuzz          every codec fuzzed with hostile input, FUZZ_EXAMPLES in all (100000)"
	@echo "make bench         us beside kube-scheduler's gang scheduling and Coscheduling, vs the bind ceiling"
	@echo "make bench-curve   our cost curve: the bigger tier at 1,000, 5,000 and 10,000 nodes (long)"
	@echo "make bench-xl      the bigger tier's backlog, us beside each peer, each on its own control plane (long)"
	@echo "make bench-scheduler-perf  Kubernetes 1.37's scheduler_perf gang workloads, us and kube-scheduler 1.37"
	@echo "make simcheck      the simulator against the real scheduler, the same trace on KWOK nodes"
	@echo "make etacheck      expected starts against real starts, a trace on KWOK nodes"
	@echo "make chaos         random faults against the scheduler, invariants checked (CHAOS_RUNS=200)"
	@echo "make soak          two hours of churn at 1,000 nodes, footprint sampled (SOAK_ARGS)"
	@echo "make clients       every job framework's real operator (KubeRay, JobSet, ...) with the scheduler"
	@echo "make oracle        kube-scheduler and the core asked the same questions (ORACLE_CASES=500)"
	@echo "make e2e-kind      the e2e suite on a kind cluster, scheduler deployed (needs Docker)"
	@echo "make setup         create $(VENV) with the project and its dev tools"
	@echo "make binaries      build (or find cached) the control plane, the Coscheduling peer, helm, promtool"

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed; set PYTHON=/path/to/python3.11")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,sim]'
	@touch $@

# The control plane, then e2e/build-tools.sh: the Coscheduling peer of make bench (its own Go
# module, cached the same way; its bench smoke test runs in make test), helm for the chart's
# tests, and promtool for the chart's alert rules (tests/unit/test_dashboard.py).
binaries:
	bash e2e/controlplane/build.sh
	bash e2e/build-tools.sh

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# The short form of the job frameworks' tests runs here (KubeRay); `make clients` runs them all.
# The Go builds run in the background while the tests that need none of them run
# (e2e/run-tests.sh, e2e/awaiting_builds.py).
test: lint
	bash e2e/run-tests.sh -m "not clients" --durations=25 $(PYTEST_ARGS)

# The e2e tests that talk to the API server most (the Workload API, gangs, volumes, devices,
# preemption), on the control plane of another Kubernetes release than make test's (one
# behind, so that clusters not yet upgraded keep working): its kube-apiserver,
# kube-controller-manager and kube-scheduler built from e2e/controlplane/releases/$(RELEASE)/,
# etcd and KWOK shared.
RELEASE ?= 1.36
RELEASE_TESTS ?= e2e/test_upstream_gangs.py e2e/test_gang_scheduling.py e2e/test_gang_volumes.py \
	e2e/test_dra.py e2e/test_preemption.py e2e/test_pod_constraints.py
test-release: setup binaries
	KUBE_BIN_DIR=$$(bash e2e/controlplane/build.sh --release $(RELEASE) | tail -n1) \
		$(PY) -m pytest $(RELEASE_TESTS) $(PYTEST_ARGS)

# Every job framework's real operator (e2e/operators/versions.txt), built from its Go module
# and cached, against the local control plane: e2e/test_clients.py.
clients: setup binaries
	for op in $$(awk '!/^#/ && NF {print $$1}' e2e/operators/versions.txt); do \
		bash e2e/operators/build.sh $$op || exit 1; done
	$(PY) -m pytest e2e/test_clients.py $(PYTEST_ARGS)

# A benchmark, not a test: figures go to bench/results/. BENCH_ARGS="--nodes 100 --pods 500"
# makes a quick one; BENCH_ARGS=--scale the scale tier (5,000 nodes, 30,000 pods; long),
# BENCH_ARGS=--scale-xl the bigger one (10,000 nodes, 60,000 pods in gangs of 1 to 256);
# BENCH_ARGS="--rounds 1" one round instead of three. make bench-curve: our cost curve.
# The standard tier's last workload is the backlog with volumes (#45: 3,000 pods in gangs of 4
# to 8, a WaitForFirstConsumer claim each, kube-scheduler's as single pods; bench/volumes.py):
# BENCH_ARGS="--workload backlog_volumes --nodes 100 --volume-pods 200 --rounds 1" alone.
BENCH_ARGS ?=
bench: setup binaries
	$(PY) -m bench.solver
	$(PY) -m bench.decode
	$(PY) -m bench.pass
	$(PY) -m bench.dra
	$(PY) -m bench.backfill
	$(PY) -m bench.fairness
	$(PY) -m bench.forecast
	$(PY) -m bench.eta
	$(PY) -m bench.run $(BENCH_ARGS)

# Each size's backlog and latency steps run apart, on control planes of their own (bench/curve.py).
CURVE_SIZES = "--nodes 1000 --pods 6000" "--nodes 5000 --pods 30000" ""
# Victims per unit of room needed (bench/victims.py): this tree against VICTIMS_BASE, a
# checkout of another build (git worktree add /tmp/base <commit>), on one seeded trace.
VICTIMS_BASE ?=
# Kubernetes' own scheduler_perf gang workloads (v1.37.2, podgroup/gangscheduling), replayed
# on the 1.37.2 control plane for us and kube-scheduler 1.37.2 (bench/scheduler_perf.py);
# PERF_ARGS="--workloads 5000Nodes_1000Gangs_3000Pods 5000Nodes_2000Gangs_6000Pods".
PERF_ARGS ?= --workloads 100Nodes_10Gangs
bench-scheduler-perf: setup binaries
	$(PY) -m bench.scheduler_perf $(PERF_ARGS)

bench-victims: setup
	@test -n "$(VICTIMS_BASE)" || { echo "set VICTIMS_BASE to a checkout of the build to compare with (git worktree add /tmp/base <commit>)"; exit 2; }
	$(PY) -m bench.victims --base $(VICTIMS_BASE)

# Preemption for GPUs, by DRA against extended resources, on the same seeded cases
# (bench/victims_gpus.py): victims and the pass's time in each encoding.
bench-victims-gpus: setup
	$(PY) -m bench.victims_gpus

bench-curve: setup binaries
	for size in $(CURVE_SIZES); do for step in backlog_mixed_gangs latency_mixed_gangs; do \
	  $(PY) -m bench.run --scale-xl $$size --only gang_scheduler --rounds 1 --no-ceiling \
	    --workload $$step || exit 1; done; done
	$(PY) -m bench.curve

# The bigger tier's backlog beside the peers: each scheduler alone on a control plane of its
# own (deleting 60,000 pods takes longer than starting one), put in one table by bench.beside.
# A peer that runs out of time is a result (the table says how far it got); ours is not. The
# old runs' files go first: a peer whose run died is then missing, not shown from an old run.
XL_SCHEDULERS = gang_scheduler kube_scheduler coscheduling_tuned coscheduling
bench-xl: setup binaries
	rm -f bench/results/gang-scheduling-xl-backlog-mixed-gangs-only-*
	for s in $(XL_SCHEDULERS); do \
	  $(PY) -m bench.run --scale-xl --only $$s --rounds 1 --no-ceiling \
	    --workload backlog_mixed_gangs || [ $$s != gang_scheduler ] || exit 1; done
	$(PY) -m bench.beside gang-scheduling-xl-backlog-mixed-gangs

# The simulator against the real scheduler (#26 part 5): the same trace (about 300 gangs of
# 1 to 32 GPUs arriving over 3 minutes) played three times on 16 KWOK nodes of a control plane
# of its own (.cluster-simcheck/) and by the simulator on their snapshot; figures to
# bench/results/simcheck.{json,md}. About 25 minutes. make test runs a short form of it
# (e2e/test_simcheck.py). SIMCHECK_ARGS="--repeats 1" for one real run; "--short" for that
# test's trace (6 nodes, 75 s of arrivals), played as often as --repeats says.
SIMCHECK_ARGS ?=
simcheck: setup binaries
	$(PY) -m bench.simcheck $(SIMCHECK_ARGS)

# Expected starts against real starts (#47): a trace played for real on KWOK nodes while the
# harness plays snapshots of it forward; figures to bench/results/eta-check[-learned].{json,md}.
# About 15 minutes; ETACHECK_ARGS="--short" for a smoke, "--learned" for learned durations.
ETACHECK_ARGS ?=
etacheck: setup binaries
	$(PY) -m bench.etacheck $(ETACHECK_ARGS)

# Fault injection: CHAOS_RUNS seeded runs (run i has seed CHAOS_SEED+i) of random workloads
# and faults on a control plane of its own (.cluster-chaos/); figures and violations, each
# with the seed that reproduces it, go to bench/results/chaos.{json,md}. Exits non-zero on
# any violation. CHAOS_ARGS="--small" for small workloads.
CHAOS_RUNS ?= 200
CHAOS_SEED ?= 1
CHAOS_ARGS ?=
chaos: setup binaries
	$(PY) -m bench.chaos --runs $(CHAOS_RUNS) --seed $(CHAOS_SEED) $(CHAOS_ARGS)

# Hours of steady churn (bench/soak.py): gangs arriving, finishing, preempted, nodes going
# and coming, on a control plane of its own (.cluster-soak/); RSS, the event loop's longest
# stretch and the pass time sampled; figures to bench/results/soak.{json,md}. Exits non-zero
# if an invariant broke. make test runs a minute of it (e2e/test_soak.py).
# SOAK_ARGS="--nodes 100 --minutes 10 --name soak-small" for a small one.
SOAK_ARGS ?=
soak: setup binaries
	$(PY) -m bench.soak $(SOAK_ARGS)

# kube-scheduler as the oracle (e2e/oracle.py): ORACLE_CASES random "may this pod go on that
# node?" cases asked of kube-scheduler and of the core, on a control plane of its own
# (.cluster-oracle/); every disagreement is printed as YAML. A short run is in make test.
ORACLE_CASES ?= 500
ORACLE_GANG_CASES ?= 60
ORACLE_DRA_CASES ?= 300
ORACLE_VOLUME_CASES ?= 120
ORACLE_SEED ?= 1
oracle: setup binaries
	$(PY) -m e2e.oracle --cases $(ORACLE_CASES) --gangs $(ORACLE_GANG_CASES) --dra $(ORACLE_DRA_CASES) --volumes $(ORACLE_VOLUME_CASES) --seed $(ORACLE_SEED)

test-unit: setup
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

# The codecs and a pass over what they parse, fuzzed with hostile input (tests/unit/test_fuzz.py):
# FUZZ_EXAMPLES examples in all, split evenly over its fuzz tests; the statistics say how many
# each ran and for how long. `make test` runs the same tests with a few hundred examples each.
FUZZ_EXAMPLES ?= 100000
fuzz: setup
	FUZZ_PROFILE=fuzz FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest tests/unit/test_fuzz.py \
		-p no:cacheprovider --hypothesis-show-statistics --timeout=0 $(PYTEST_ARGS)

cluster-up: setup
	$(PY) -m testbed.cluster up --dir $(CLUSTER_DIR)

cluster-down: setup
	$(PY) -m testbed.cluster down --dir $(CLUSTER_DIR)

demo: cluster-up
	$(PY) -m testbed.nodes --kubeconfig $(CLUSTER_DIR)/kubeconfig --racks 2 --nodes-per-rack 4 \
		--cpu 32 --memory 128Gi --gpu 8 --topology gang-scheduler-system/cluster-topology
	@$(KUBECTL) wait node -l gang-scheduler.io/fake-node=true --for=condition=Ready \
		--timeout=60s >/dev/null
	-@$(PY) -m testbed.cluster scheduler --dir $(CLUSTER_DIR)
	$(KUBECTL) apply -f manifests/examples/
	@$(KUBECTL) wait configmap group-a --for=jsonpath='{.data.status}'=Bound --timeout=60s \
		>/dev/null 2>&1 || true
	@$(KUBECTL) wait pod -l app=demo --for=jsonpath='{.spec.nodeName}' --timeout=60s \
		>/dev/null 2>&1 || true
	@echo
	@$(KUBECTL) get podgroups.scheduling.x-k8s.io
	@echo
	@$(KUBECTL) get podgroups   # the built-in scheduling.k8s.io kind (upstream-gang.yaml)
	@echo
	@$(KUBECTL) get pods -o wide -L sakkara.member.rank
	@echo
	@$(KUBECTL) get configmap group-a -o jsonpath='{.data.placement}{"\n"}' 2>/dev/null || true
	@echo
	@echo "The local control plane is up: 8 fake GPU nodes in 2 racks, gang-scheduler running"
	@echo "(log: $(CLUSTER_DIR)/logs/scheduler.log). The MPI gang bound whole; the Spark job bound"
	@echo "its driver and the executors that fit; the Job of Sakkara group-a went to one rack,"
	@echo "spread over its nodes, ranked (above: its placement). Explore:"
	@echo "  export KUBECONFIG=$$PWD/$(CLUSTER_DIR)/kubeconfig PATH=$$PWD/$(CLUSTER_DIR)/bin:\$$PATH"
	@echo "  kubectl describe pg mpi-train; kubectl get events --sort-by=.lastTimestamp"
	@echo "  kubectl get configmap group-a -o yaml; gang-scheduler explain default/group-a"
	@echo "Stop everything with: make cluster-down"

# The e2e suite against a kind cluster with the scheduler deployed from manifests/. Needs
# Docker, kind and kubectl (not available on the CI machine, which has no Docker engine);
# everything after cluster creation is the same suite as `make test`.
KIND_CLUSTER ?= gang-scheduler
KWOK_RELEASE ?= https://github.com/kubernetes-sigs/kwok/releases/download/v0.8.0
e2e-kind: setup
	kind create cluster --name $(KIND_CLUSTER)
	docker build -t gang-scheduler:dev .
	kind load docker-image gang-scheduler:dev --name $(KIND_CLUSTER)
	kubectl apply -f crds/ && kubectl apply -k manifests/
	kubectl apply -f $(KWOK_RELEASE)/kwok.yaml -f $(KWOK_RELEASE)/stage-fast.yaml
	kubectl -n gang-scheduler-system rollout status deployment/gang-scheduler --timeout=180s
	E2E_USE_EXISTING_CLUSTER=1 E2E_SCHEDULER_IN_CLUSTER=1 KUBECONFIG=$${KUBECONFIG:-$$HOME/.kube/config} \
		$(PY) -m pytest e2e -m "not local_control_plane" $(PYTEST_ARGS)

clean: cluster-down
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis .import_linter_cache
