"""The runner: the `local` backend's sandbox port served over HTTP (see app.py).

    python -m codeexec.runner        (what `make runner` runs)
"""
