"""Who a request comes from: a visitor (a browser, known by a secret it keeps), and the network address behind it.

A visitor is a browser, not a page: the page asks the browser for its key, a random secret of 256 bits that the
app gave it on its first visit (`new_key`) and that it keeps in its local storage, so that a reload, or a second
tab, is the same visitor, and their runs, places in line and private files are still theirs. The visitor is known by
a digest of the key (`identity`): what the server keeps and compares, never the key itself, so that nothing it
stores or shows can be used to pose as someone. A request without a key (a script's `Client`, an API call) is
its gradio session, as before. Neither a session nor a key can be guessed, and no page ever shows another's. A
request with neither (gradio's `/gradio_api/run/` and `/api/` routes take one without a session) is its address
(`network_of`): one visitor for every such request from that network, with that network's limits; from this host's
own network it is no one.

Every per-visitor limit is kept by address as well: a script picks a new session with every `Client`, and
gradio's `/call/` API a new session with every call, but neither a new address, so a fresh session no longer brings
a fresh share of the disk, of a line or of the training line. Requests from this host's own network (loopback,
private addresses) have no address: the person at the machine is limited by visitor alone. Carrier-grade NAT
addresses (100.64.0.0/10) are not public either. Behind a proxy the app trusts, though, every address it forwards
is a visitor, whatever its range: only a peer of the app itself can be this host's network. Behind a proxy,
X-Forwarded-For names whom it forwards, but any client can write that header itself: the app believes it only from the
proxies it trusts, the addresses or networks in $BERT_DEMO_TRUSTED_PROXIES (comma-separated), or, on a Hugging Face
Space ($SPACE_ID set), whose only way in is the platform's proxy, the private networks (`SPACE_PROXIES`). Elsewhere no
proxy is trusted unless named. An IPv6 visitor is their /56: a subscriber is given a /64 at least, often a /56 (256
/64s), and picks a new address in it at will. A network given less than a /56 shares it with its neighbours, and one
given a /48 counts as 256 visitors.
"""
from __future__ import annotations

import functools
import hashlib
import ipaddress
import os
import re
import secrets
from typing import Any

KEY_BYTES = 32  # a visitor's key: 256 random bits, as URL-safe base64 (43 characters)
KEY_PATTERN = re.compile(r"[A-Za-z0-9_-]{43}")
IDENTITY_PREFIX = "visitor-"  # then a digest of the key; a session (gradio's) never begins so
NETWORK_PREFIX = "network-"  # then the address: a request with neither key nor session (`network_of`)
TRUSTED_PROXIES_ENV = "BERT_DEMO_TRUSTED_PROXIES"
SPACE_PROXIES = "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10,fc00::/7"  # where a Space's proxy may be
IPV6_PREFIX = 56  # the IPv6 addresses that count as one visitor: one subscriber's allocation

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


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
    request's session, else its network (`network_of`); None for a request with none of them (from this host's own
    network, without a session). A session named like an identity or a network is no session."""
    address = address_of(request)
    if is_key(key):
        return Visitor(identity(key), address)
    session = getattr(request, "session_hash", None)
    if session is None or str(session).startswith((IDENTITY_PREFIX, NETWORK_PREFIX)):
        return network_of(address)
    return Visitor(session, address)


def network_of(address: str | None) -> Visitor | None:
    """The visitor that every request without a key or a session from `address` is (None for no address)."""
    return None if address is None else Visitor(NETWORK_PREFIX + address, address)


def is_network(visitor: Any) -> bool:
    """Whether a visitor is a network's requests without a session (`network_of`), not one browser or session."""
    return isinstance(visitor, str) and visitor.startswith(NETWORK_PREFIX)


def address_of(request: Any) -> str | None:
    """The address a request (gradio's, or starlette's) comes from, as one visitor: an IPv4 address, or an IPv6 /56
    network; None for this host's own network, whose limits are by session. Its peer, unless the peer is a trusted
    proxy: then, reading X-Forwarded-For from the right (each proxy appends the address it saw), the first address
    that is not a trusted proxy. The entries further left are whatever the client wrote there. A peer is a visitor
    where its address is public; an address a trusted proxy forwards is a visitor whatever its range (private,
    shared, documentation): on a Space every visitor comes through the proxy, and none is this host."""
    peer = _parse(getattr(getattr(request, "client", None), "host", None))
    headers = getattr(request, "headers", None) or {}
    hops = [hop for hop in headers.get("x-forwarded-for", "").split(",") if hop.strip()]
    trusted, forwarded = trusted_proxies(), False
    while peer is not None and any(peer in network for network in trusted):
        peer = _parse(hops.pop()) if hops else None  # a proxy that forwards no one names no visitor
        forwarded = True
    if peer is None:
        return None
    return _visitor_address(peer) if forwarded or peer.is_global else None  # through a proxy: whatever its range


def same_address(one: Any, other: Any) -> bool:
    """Whether two visitors (or owners given as plain sessions) are known to come from the same address."""
    address = getattr(one, "address", None)
    return address is not None and address == getattr(other, "address", None)


def trusted_proxies() -> tuple[Network, ...]:
    """The networks whose X-Forwarded-For the app believes, from the environment (see the module's docstring)."""
    default = SPACE_PROXIES if os.environ.get("SPACE_ID") else ""
    return _networks(os.environ.get(TRUSTED_PROXIES_ENV, default))


@functools.lru_cache(maxsize=4)
def _networks(listed: str) -> tuple[Network, ...]:
    networks = []
    for entry in filter(None, (entry.strip() for entry in listed.split(","))):
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(f"${TRUSTED_PROXIES_ENV} names {entry!r}, which is not an address or a network: "
                             "give addresses or networks such as 10.0.0.0/8, separated by commas") from None
    return tuple(networks)


def _parse(text: str | None) -> Address | None:
    """An address as a peer or a proxy writes it (with or without a port; IPv6 in brackets or bare), IPv4 inside
    IPv6 as IPv4; None for anything else."""
    text = (text or "").strip()
    if text.startswith("["):  # [2001:db8::1]:443
        text = text[1:].split("]", 1)[0]
    elif text.count(":") == 1:  # 93.184.216.34:443
        text = text.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped if mapped is not None else address


def _visitor_address(address: Address) -> str:
    if address.version == 6:
        return str(ipaddress.ip_network(f"{address}/{IPV6_PREFIX}", strict=False))
    return str(address)
