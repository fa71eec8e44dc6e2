"""The server's loopback ports: picked together, so never the same port twice."""

from __future__ import annotations

import socket

from ncf.serving.triton_env import LOOPBACK, free_ports


def test_free_ports_are_distinct_and_bindable():
    ports = free_ports(3)
    assert len(set(ports)) == 3
    for port in ports:  # each is free again once picked
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((LOOPBACK, port))
