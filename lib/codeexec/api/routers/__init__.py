"""The routes, one module per resource."""
