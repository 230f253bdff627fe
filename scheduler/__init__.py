"""gang-scheduler: a standalone Kubernetes scheduler that starts a job's pods together.

The package is layered (see docs/architecture.md); import-linter keeps the layers apart.
"""

__version__ = "0.1.0"
