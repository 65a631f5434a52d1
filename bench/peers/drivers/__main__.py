"""`python -m bench.peers.drivers SYSTEM worker|driver ...`: the worker or the driver of one peer, in its venv.

SYSTEM is `pydantic_ai` or `openai_agents` (the module `bench.peers.drivers.<SYSTEM>_peer`). The workflows are
defined in that module rather than in `__main__`, so Temporal's sandbox can import them by name.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.drivers")
    parser.add_argument("system", choices=["pydantic_ai", "openai_agents"])
    parser.add_argument("role", choices=["worker", "driver"])
    parser.add_argument("--address", required=True, help="Temporal HOST:PORT")
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--model-url", required=True, help="the fake model server's base URL (ending in /v1)")
    parser.add_argument("--local-model", action="store_true", help="OpenAI Agents: the model call as a local activity")
    args = parser.parse_args()
    os.environ["PEERS_MODEL_URL"] = args.model_url
    module = importlib.import_module(f"bench.peers.drivers.{args.system}_peer")
    asyncio.run(module.worker(args) if args.role == "worker" else module.driver(args))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # sdk-python#300: a Temporal client process can crash at interpreter exit


if __name__ == "__main__":
    main()
