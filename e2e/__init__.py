"""The end-to-end scenarios, run against a real control plane (``testbed``): the local one
in CI, or whatever cluster ``KUBECONFIG`` names.
"""
