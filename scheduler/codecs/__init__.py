"""Pure translation between Kubernetes objects (plain dicts) and model objects.

Malformed input becomes a model object carrying a validation error that names the field and
the allowed values; nothing here raises on bad user input or talks to the API server.
"""
