"""`.venv/bin/python -m bench.peers [--quick] [--out PATH]`: Keel and the durable agent peers side by side."""

from bench.peers.run import main

main()
