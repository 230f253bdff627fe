"""The I/O shell: the only layer that talks to the API server.

It takes decisions from ``scheduler.core`` and applies them: bindings, status patches,
label writes and Events, with bounded concurrency, assume/forget in the cache, and retries.
"""
