"""Who a request comes from: a visitor (a browser, known by a secret it keeps), and the network address behind it.

A visitor is a browser, not a page: the page asks the browser for its key, a random secret of 256 bits that the
app gave it on its first visit (`new_key`) and that it keeps in its local storage, so that a reload, or a second
tab, is the same visitor, and their runs, places in line and private files are still theirs. The visitor is known by
a digest of the key (`identity`): what the server keeps and compares, never the key itself, so that nothing it
stores or shows can be used to pose as someone. A request without a key (a script's `Client`, an API call) is
its gradio session, as before. Neither a session nor a key can be guessed, and no page ever shows another's.

Every per-visitor limit is kept by address as well: a script picks a new session with every `Client`, but not a
new address, so a fresh session no longer brings a fresh share of the disk or a fresh place in the training line.
Requests from this host's own network (loopback, private addresses) have no address: the person at the machine is
limited by visitor alone.
"""
from __future__ import annotations

import hashlib
import ipaddress
import re
import secrets
from typing import Any

KEY_BYTES = 32  # a visitor's key: 256 random bits, as URL-safe base64 (43 characters)
KEY_PATTERN = re.compile(r"[A-Za-z0-9_-]{43}")
IDENTITY_PREFIX = "visitor-"  # then a digest of the key; a session (gradio's) never begins so


class Visitor(str):
    """A visitor (the string itself, their identity or session: what privacy and ownership compare) with the
    address their requests come from (`address`, None when unknown: a backend call or a test). Equal to the
    identity as plain text, so a run's owner and a checkpoint's `visible_to` are the identity."""

    address: str | None

    def __new__(cls, identity: str, address: str | None = None) -> "Visitor":
        visitor = super().__new__(cls, identity)
        visitor.address = address
        return visitor


def new_key() -> str:
    """A new visitor's key, for their browser to keep."""
    return secrets.token_urlsafe(KEY_BYTES)


def is_key(key: Any) -> bool:
    """Whether a value is a key as `new_key` makes them (a browser may send anything)."""
    return isinstance(key, str) and KEY_PATTERN.fullmatch(key) is not None


def identity(key: str) -> str:
    """What the app keeps of a visitor: a digest of their key, from which the key cannot be found."""
    return IDENTITY_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:32]


def visitor_of(request: Any, key: Any = None) -> Visitor | None:
    """The visitor a gradio request comes from: the browser's key where it sent one (see `new_key`), else the
    request's session; None for a request with neither."""
    if is_key(key):
        return Visitor(identity(key), address_of(request))
    session = getattr(request, "session_hash", None)
    if session is None or str(session).startswith(IDENTITY_PREFIX):  # a session posing as a key's identity
        return None
    return Visitor(session, address_of(request))


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
