"""Upstream sources (JSON files, HTTP, RTR caches) that produce complete snapshots."""
