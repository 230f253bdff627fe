"""Makes the control-plane fixtures of e2e/fixtures.py available to every test folder."""

pytest_plugins = ["e2e.fixtures"]
