#!/usr/bin/env python3
"""The broadcast server a user would write with Python's `websockets`: every text message
a client sends goes to every connected client (the sender too), with `websockets.broadcast`.

    python3 bench/broadcast_server.py [--host 127.0.0.1] [--port 0]

Prints `listening on ws://HOST:PORT/` once it listens. Compression is off, as in tabd and
the libwebsockets mirror. Used by bench/run as the Python baseline.
"""
import argparse
import asyncio
import signal

import websockets
from websockets.asyncio.server import broadcast, serve

CLIENTS = set()


async def handler(ws):
    CLIENTS.add(ws)
    try:
        async for message in ws:
            broadcast(CLIENTS, message)
    except websockets.ConnectionClosed:
        pass
    finally:
        CLIENTS.discard(ws)


async def main(host, port):
    stop = asyncio.get_running_loop().create_future()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set_result, None)
    async with serve(handler, host, port, compression=None, max_queue=None,
                     ping_interval=None, backlog=4096) as server:
        bound = server.sockets[0].getsockname()[1]
        print(f"listening on ws://{host}:{bound}/", flush=True)
        await stop


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(main(args.host, args.port))
