"""Pure translation between Kubernetes objects (plain dicts) and model objects.

Malformed input becomes a model object carrying a validation error that names the field and
the allowed values; nothing here raises on bad user input or talks to the API server. The
readers take any JSON value at all (``tests/unit/test_fuzz.py`` holds them to it): a value of
the wrong JSON type counts as absent (``shapes``).
"""
