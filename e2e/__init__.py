"""The local control plane and the end-to-end scenarios that run against it.

``e2e.cluster`` starts a real etcd, kube-apiserver and KWOK from binaries built by
``e2e/controlplane/build.sh``; ``e2e.nodes`` creates fake nodes and topology ConfigMaps.
"""
