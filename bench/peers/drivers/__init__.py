"""The peers' workers and drivers. Each module runs under its own virtualenv's python (`bench/peers/.venvs/`),
which has the peer's packages and not Keel's, so mypy (run in Keel's venv) leaves this folder out."""
