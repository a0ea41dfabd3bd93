"""The operator's HTTP side: metrics, status, health, the JSON export, queries and a dashboard.

Read in this order: `settings` (what can be configured), `wire` (sans-IO request parsing and
response heads), `server` (the anyio listener), `observe` (read-only views of the running app
and the health rule), `metrics` (Prometheus collectors on an injected registry), `status` (the
/status document), `export` (the rpki-client JSON of the served set), `queries` (validity and
ASPA documents), `dashboard` (the HTML page), `api` (the routes, tying them together).
"""
