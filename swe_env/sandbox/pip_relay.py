"""Runs INSIDE an env build's sandbox (stdlib only): pip's proxy at 127.0.0.1:PORT of the build's own network
namespace, each connection relayed to the host's index proxy through the unix socket bound into the sandbox.

The build has no other network: what it can reach is what that proxy allows (swe_env/sandbox/index_proxy.py), so
this relay decides nothing and the build may replace it. It returns once it listens, then serves in the background.

Usage: python pip_relay.py PORT SOCKET
"""

import os
import socket
import sys
import threading


def pipe(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def serve(conn, path):
    upstream = socket.socket(socket.AF_UNIX)
    try:
        upstream.connect(path)
    except OSError:
        conn.close()
        return
    threading.Thread(target=pipe, args=(conn, upstream), daemon=True).start()
    pipe(upstream, conn)


def main():
    port, path = int(sys.argv[1]), sys.argv[2]
    server = socket.socket(socket.AF_INET)
    server.bind(("127.0.0.1", port))
    server.listen(64)
    if os.fork() != 0:  # the build goes on once the relay listens
        os._exit(0)
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=serve, args=(conn, path), daemon=True).start()


if __name__ == "__main__":
    main()
