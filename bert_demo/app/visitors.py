"""Who a request comes from: a browser session, and the network address behind it.

A private run belongs to a browser session (gradio's `session_hash`). Every per-visitor limit is kept by session
and by address as well: a script picks a new session with every `Client`, but not a new address, so a fresh session
no longer brings a fresh share of the disk or a fresh place in the training line. Requests from this host's own
network (loopback, private addresses) have no address: the person at the machine is limited by session alone.
"""
from __future__ import annotations

import ipaddress
from typing import Any


class Visitor(str):
    """A browser session (the string itself: what privacy and ownership compare) with the address its requests
    come from (`address`, None when unknown: a backend call or a test). Equal to its session as plain text, so a
    run's owner and a checkpoint's `visible_to` stay the session."""

    address: str | None

    def __new__(cls, session: str, address: str | None = None) -> "Visitor":
        visitor = super().__new__(cls, session)
        visitor.address = address
        return visitor


def visitor_of(request: Any) -> Visitor | None:
    """The visitor a gradio request comes from; None for a request without a session."""
    session = getattr(request, "session_hash", None)
    return Visitor(session, address_of(request)) if session is not None else None


def address_of(request: Any) -> str | None:
    """The public address a request comes from, as gradio reports it; None for one from this host's own network
    (loopback or private: the person at the machine, or a proxy that names no one), whose limits are by session.
    Behind a proxy (a Space's, whose own address is a private one), the proxy's X-Forwarded-For says whom it forwards:
    the last public address in that list is the one the proxy saw, while the entries before it are whatever the
    client wrote there. Without a proxy in front, the header is the client's own words and is ignored."""
    peer = getattr(getattr(request, "client", None), "host", None)
    if peer is None:
        return None
    if not _internal(peer):
        return peer
    headers = getattr(request, "headers", None) or {}
    hops = [hop.strip() for hop in headers.get("x-forwarded-for", "").split(",")]
    public = [hop for hop in hops if not _internal(hop)]
    return public[-1] if public else None


def same_address(one: Any, other: Any) -> bool:
    """Whether two visitors (or owners given as plain sessions) are known to come from the same address."""
    address = getattr(one, "address", None)
    return address is not None and address == getattr(other, "address", None)


def _internal(text: str) -> bool:
    """A loopback or private address (this host's own network), or not an address at all."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return True
    return address.is_private or address.is_loopback
