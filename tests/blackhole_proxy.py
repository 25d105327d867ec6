#!/usr/bin/env python3
"""A TCP proxy that can stop forwarding without closing anything.

    blackhole_proxy.py TARGET_HOST TARGET_PORT PORT_FILE

Listens on 127.0.0.1 (a free port, written to PORT_FILE once listening) and
forwards every connection to TARGET. SIGUSR1 black-holes the path, as a load
balancer or a NAT table that lost its entry does: every byte either way is
read and dropped, nothing is closed, and new connections are accepted and then
hear nothing. SIGUSR2 heals it: the connections that lived through the black
hole are closed (their streams lost bytes), and new ones are forwarded again.
Used by the relay's and the consumer's tests (issue 41: a relay hung, ready,
for as long as such a path was down).
"""
import asyncio
import signal
import sys

state = {"dark": False, "generation": 0}
live = set()  # (generation, writer, writer) of each proxied pair


async def pump(reader, writer, gen):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            if state["dark"] or state["generation"] != gen:
                continue  # dropped: the path forwards nothing
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    if not state["dark"]:
        writer.close()


async def handle(client_r, client_w, host, port):
    gen = state["generation"]
    if state["dark"]:
        # Accepted, never answered: wait for the heal, then close.
        while state["dark"]:
            await asyncio.sleep(0.05)
        client_w.close()
        return
    try:
        server_r, server_w = await asyncio.open_connection(host, port)
    except OSError:
        client_w.close()
        return
    pair = (gen, client_w, server_w)
    live.add(pair)
    await asyncio.gather(pump(client_r, server_w, gen), pump(server_r, client_w, gen))
    live.discard(pair)


def darken():
    state["dark"] = True


def heal():
    state["dark"] = False
    state["generation"] += 1
    for _, a, b in list(live):
        a.close()
        b.close()
    live.clear()


async def main():
    host, port, port_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    server = await asyncio.start_server(lambda r, w: handle(r, w, host, port), "127.0.0.1", 0)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, darken)
    loop.add_signal_handler(signal.SIGUSR2, heal)
    loop.add_signal_handler(signal.SIGTERM, loop.stop)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.sockets[0].getsockname()[1]) + "\n")
    import os
    os.replace(port_file + ".tmp", port_file)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except RuntimeError:
        pass  # the loop stopped on SIGTERM
