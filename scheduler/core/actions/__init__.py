"""The actions of a pass, each a module that walks the session's queue with Statements.

Today: ``allocate``. Preemption and backfill come as actions of their own beside it, sharing
the session's policy rather than branching inside allocate.
"""
