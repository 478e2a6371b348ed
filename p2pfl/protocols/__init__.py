"""Protocols and the registry mapping YAML names to classes."""

from __future__ import annotations

from p2pfl.errors import ConfigError
from p2pfl.protocols.base import Protocol, ProtocolParams
from p2pfl.protocols.reference.local import Local
from p2pfl.protocols.server.fedavg import FedAvg
from p2pfl.protocols.serverless.gossip import Gossip

__all__ = ["Protocol", "ProtocolParams", "PROTOCOLS", "get_protocol", "Gossip", "FedAvg", "Local"]

PROTOCOLS: dict[str, type[Protocol]] = {cls.name: cls for cls in (Gossip, FedAvg, Local)}


def get_protocol(name: str, source: str = "scenario") -> type[Protocol]:
    """The protocol class registered as ``name``; ConfigError listing valid names otherwise."""
    try:
        return PROTOCOLS[name]
    except KeyError:
        valid = ", ".join(sorted(PROTOCOLS))
        raise ConfigError(f"{source}: field 'protocol.name': unknown protocol {name!r}; choose one of: {valid}") from None
