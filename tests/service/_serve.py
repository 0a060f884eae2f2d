"""Run the query service in a process of its own, for the load tests.

    python tests/service/_serve.py CONFIG PORT

builds the app exactly as ``dpkit serve --config CONFIG`` does
(``create_app(load_config(CONFIG))``, the same keep-alive) and serves it with Uvicorn on
127.0.0.1:PORT, quietly. The tests kill it with SIGKILL to check what a crash
leaves behind, so it holds no state of its own besides the store.
"""

from __future__ import annotations

import sys

import uvicorn

from dpkit.service.app import KEEP_ALIVE_SECONDS, create_app
from dpkit.service.config import load_config


def main(argv: list[str]) -> None:
    config_path, port = argv[1], int(argv[2])
    app = create_app(load_config(config_path))
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )


if __name__ == "__main__":
    main(sys.argv)
