"""The HTTP API: the app (app.py), its routers by resource (routers/), and what they share
(dependencies.py)."""
