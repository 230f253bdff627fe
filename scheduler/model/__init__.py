"""Frozen dataclasses for resources, pods, nodes, gangs and topology; stdlib only."""
