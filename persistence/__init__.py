"""Persistence of published state (SQLite, DuckDB); memory-only by default."""
