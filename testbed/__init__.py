"""The test bed that the e2e scenarios, the integration tests and the bench all stand on.

``testbed.cluster`` starts a real etcd, kube-apiserver and KWOK from binaries built by
``e2e/controlplane/build.sh``; ``testbed.nodes`` creates fake nodes and topology ConfigMaps;
``testbed.rest`` is the one HTTP client the scenarios and the oracle read and write with.
It imports neither the scenarios nor the bench (an import-linter contract says so), so the
bench can use it and the scenarios can drive the bench without a cycle.
"""
