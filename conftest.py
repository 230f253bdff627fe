"""Makes the control-plane fixtures of e2e/fixtures.py available to every test folder, and
lets make test start its tests while its Go builds run (e2e/awaiting_builds.py)."""

pytest_plugins = ["e2e.fixtures", "e2e.awaiting_builds"]
