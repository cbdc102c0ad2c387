"""bert_demo/app/visitors.py: a visitor is their session, with the address their requests come from; behind a
proxy the app trusts, that address is the one the proxy saw, never what the client wrote in X-Forwarded-For; the
carrier-grade NAT range is not public, an IPv6 visitor is their /56, and requests without a session from one network
are one visitor."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from bert_demo.app.visitors import (
    TRUSTED_PROXIES_ENV,
    Visitor,
    address_of,
    identity,
    is_key,
    is_network,
    new_key,
    same_address,
    visitor_of,
)


@pytest.fixture(autouse=True)
def no_trust_configured(monkeypatch):
    """Each test starts off a Space, with no proxy trusted, whatever the machine running the tests says."""
    monkeypatch.delenv(TRUSTED_PROXIES_ENV, raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)


def request(peer: str | None, forwarded: str | None = None, session: str | None = "s1") -> SimpleNamespace:
    headers = {"x-forwarded-for": forwarded} if forwarded is not None else {}
    return SimpleNamespace(client=SimpleNamespace(host=peer) if peer else None, headers=headers, session_hash=session)


def test_a_direct_request_is_its_peer_and_a_header_it_wrote_itself_is_ignored():
    assert address_of(request("93.184.216.34")) == "93.184.216.34"
    assert address_of(request("93.184.216.34", forwarded="151.101.1.69")) == "93.184.216.34"


def test_a_forwarded_address_is_believed_only_from_a_proxy_the_app_trusts(monkeypatch):
    forged = request("127.0.0.1", forwarded="93.184.216.34")
    assert address_of(forged) is None  # loopback wrote it, and nobody said loopback is a proxy: by session
    assert address_of(request("10.0.3.4", forwarded="93.184.216.34")) is None
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "127.0.0.1, 10.0.0.0/8")
    assert address_of(forged) == "93.184.216.34"
    assert address_of(request("10.0.3.4", forwarded="93.184.216.34")) == "93.184.216.34"
    assert address_of(request("192.168.1.2", forwarded="93.184.216.34")) is None  # not one of the named proxies


def test_on_a_space_its_private_proxy_is_trusted_and_elsewhere_none_unless_named(monkeypatch):
    behind = request("10.16.3.80", forwarded="93.184.216.34")  # as a Space's proxy forwards a visitor
    assert address_of(behind) is None
    monkeypatch.setenv("SPACE_ID", "someone/bert-demo")
    assert address_of(behind) == "93.184.216.34"
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "")  # the owner's word wins: no proxy at all
    assert address_of(behind) is None


def test_behind_trusted_proxies_the_address_the_outermost_one_saw_is_the_visitor(monkeypatch):
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "10.0.0.0/8")
    # a client that writes its own header before the proxy adds the address it saw: the proxy's entry wins
    assert address_of(request("10.0.3.4", forwarded="151.101.1.69, 93.184.216.34")) == "93.184.216.34"
    assert address_of(request("10.0.3.4", forwarded="93.184.216.34, 10.1.1.1")) == "93.184.216.34"  # inner proxies
    assert address_of(request("10.0.3.4", forwarded="93.184.216.34:51234")) == "93.184.216.34"  # with its port
    assert address_of(request("10.0.3.4", forwarded="not an address")) is None
    assert address_of(request("10.0.3.4")) is None  # the proxy itself, forwarding no one


def test_the_carrier_grade_nat_range_is_not_public_as_a_peer(monkeypatch):
    assert address_of(request("100.64.3.4")) is None  # a proxy there had counted as one public visitor


@pytest.mark.parametrize("forwarded", ["100.64.3.4", "192.0.2.7", "198.51.100.7", "203.0.113.7", "10.9.8.7",
                                       "172.16.5.5", "192.168.1.2", "fd00::7"])
def test_an_address_a_trusted_proxy_forwards_is_a_visitor_whatever_its_range(monkeypatch, forwarded):
    """Only the host itself is the host: documentation, private and shared (CGNAT) addresses forwarded by a trusted
    proxy are visitors, with a visitor's limits."""
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "127.0.0.1")
    assert address_of(request("127.0.0.1", forwarded=forwarded)) not in (None, "")
    assert address_of(request("127.0.0.1")) is None  # the host itself, forwarding no one


def test_an_ipv6_visitor_is_their_56_so_a_new_address_or_a_new_64_in_it_is_the_same_visitor(monkeypatch):
    one = address_of(request("2a00:1450:4001:81c::200e"))
    assert one == "2a00:1450:4001:800::/56"
    assert address_of(request("2a00:1450:4001:81c:1234:5678:9abc:def0")) == one
    assert address_of(request("2a00:1450:4001:8ff::200e")) == one  # another /64 of the same /56 (issue 63)
    assert address_of(request("2a00:1450:4001:900::200e")) != one
    assert address_of(request("::ffff:93.184.216.34")) == "93.184.216.34"  # IPv4 written as IPv6
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "fc00::/7")
    assert address_of(request("fd12::1", forwarded="[2a00:1450:4001:81c::1]:443")) == one


def test_a_mistyped_list_of_proxies_is_refused_with_what_is_wrong(monkeypatch):
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "10.0.0.0/8, proxy.local")
    with pytest.raises(ValueError, match=f"\\${TRUSTED_PROXIES_ENV} names 'proxy.local', which is not an address"):
        address_of(request("10.0.3.4", forwarded="93.184.216.34"))


def test_a_visitor_on_this_hosts_own_network_has_no_address_so_sessions_are_not_pooled():
    assert address_of(request("127.0.0.1")) is None and address_of(request("192.168.1.20")) is None


def test_a_visitor_is_equal_to_its_session_and_stored_as_it(monkeypatch):
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "10.0.0.0/8")
    visitor = visitor_of(request("10.0.3.4", forwarded="93.184.216.34", session="abc"))
    assert visitor == "abc" and visitor.address == "93.184.216.34" and json.dumps({"v": visitor}) == '{"v": "abc"}'


def test_requests_without_a_session_are_their_network_and_from_this_host_no_one():
    """gradio's /run/ and /api/ routes take requests without a session: they had been no one, and their runs no
    one's (issue 63)."""
    one, again = (visitor_of(request("93.184.216.34", session=None)) for _ in range(2))
    assert one == again and is_network(one) and one.address == "93.184.216.34"
    assert visitor_of(request("151.101.1.69", session=None)) != one
    assert visitor_of(request("93.184.216.34", session=one)) == one  # a session named like it: the network itself
    assert not is_network(visitor_of(request("93.184.216.34", session="abc")))
    assert visitor_of(request("127.0.0.1", session=None)) is None
    assert visitor_of(request("127.0.0.1", session=str(one))) is None  # from this host, posing as a network


def test_two_sessions_share_an_address_only_when_both_are_known():
    assert same_address(Visitor("a", "93.184.216.34"), Visitor("b", "93.184.216.34"))
    assert not same_address(Visitor("a", "93.184.216.34"), Visitor("b", "151.101.1.69"))
    assert not same_address(Visitor("a"), Visitor("b")) and not same_address("a", "b")


def test_a_browser_is_known_by_a_digest_of_its_key_across_reloads_and_a_request_without_one_by_its_session():
    key = new_key()
    before, after = (visitor_of(request("127.0.0.1", session=session), key) for session in ("s1", "s2"))
    assert before == after == identity(key) and key not in before  # a reload is a new session, the same visitor
    assert visitor_of(request("127.0.0.1", session="s1"), new_key()) != before  # another browser
    assert visitor_of(request("127.0.0.1", session="s1"), "a forged key") == "s1"  # not a key: the session
    assert visitor_of(request("127.0.0.1", session=before)) is None  # a session posing as a browser's identity


def test_keys_are_256_random_bits_never_twice_the_same():
    keys = {new_key() for _ in range(1000)}
    assert len(keys) == 1000 and all(is_key(key) and len(key) == 43 for key in keys)
    assert not is_key(None) and not is_key(42) and not is_key("x" * 42) and not is_key("x" * 42 + "!")
