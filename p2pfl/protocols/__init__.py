"""Protocols: one module per protocol under ``serverless/``, ``server/`` and ``reference/``.

The base class and its params are here; the YAML-name registry is
``p2pfl.registry`` (lazy: looking up one name imports one module).
"""

from __future__ import annotations

from p2pfl.protocols.base import Process, Protocol, ProtocolParams
from p2pfl.registry import all_protocols, get_protocol

__all__ = ["Process", "Protocol", "ProtocolParams", "all_protocols", "get_protocol"]
