"""The operator's HTTP side: metrics, status, health, the JSON export, queries and a dashboard.

Read in this order: `settings` (what can be configured), `wire` (sans-IO request parsing and
response heads), `server` (the anyio listener), `observe` (one consistent view of the running
app), `metrics` (Prometheus collectors on an injected registry), `export` (the rpki-client JSON
of the served set), `api` (the routes), `dashboard` (the HTML page).
"""
