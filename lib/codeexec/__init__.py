"""codeexec: a code interpreter that serves the LibreChat Code Interpreter API.

A session IS a sandbox: the session id is the sandbox id and a file id is a path under the
artifact directory. The library keeps no store of its own (see `codeexec.sandbox.port`).
"""
