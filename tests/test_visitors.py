"""bert_demo/app/visitors.py: a visitor is their session, with the address their requests come from; behind a
proxy that address is the one the proxy saw, never what the client wrote in X-Forwarded-For."""
from __future__ import annotations

import json
from types import SimpleNamespace

from bert_demo.app.visitors import Visitor, address_of, identity, is_key, new_key, same_address, visitor_of


def request(peer: str | None, forwarded: str | None = None, session: str | None = "s1") -> SimpleNamespace:
    headers = {"x-forwarded-for": forwarded} if forwarded is not None else {}
    return SimpleNamespace(client=SimpleNamespace(host=peer) if peer else None, headers=headers, session_hash=session)


def test_a_direct_request_is_its_peer_and_a_header_it_wrote_itself_is_ignored():
    assert address_of(request("93.184.216.34")) == "93.184.216.34"
    assert address_of(request("93.184.216.34", forwarded="151.101.1.69")) == "93.184.216.34"


def test_behind_a_proxy_the_last_public_address_it_forwards_is_the_visitor():
    assert address_of(request("10.0.3.4", forwarded="93.184.216.34")) == "93.184.216.34"  # a Space's proxy
    # a client that writes its own header before the proxy adds the address it saw: the proxy's entry wins
    assert address_of(request("10.0.3.4", forwarded="151.101.1.69, 93.184.216.34")) == "93.184.216.34"
    assert address_of(request("10.0.3.4", forwarded="93.184.216.34, 10.1.1.1")) == "93.184.216.34"  # inner proxies
    assert address_of(request("127.0.0.1", forwarded="not an address")) is None  # this host's own: by session


def test_a_visitor_on_this_hosts_own_network_has_no_address_so_sessions_are_not_pooled():
    assert address_of(request("127.0.0.1")) is None and address_of(request("192.168.1.20")) is None


def test_a_visitor_is_equal_to_its_session_and_stored_as_it():
    visitor = visitor_of(request("10.0.3.4", forwarded="93.184.216.34", session="abc"))
    assert visitor == "abc" and visitor.address == "93.184.216.34" and json.dumps({"v": visitor}) == '{"v": "abc"}'
    assert visitor_of(request("93.184.216.34", session=None)) is None


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
