"""envbuilder/_http.py: which URLs envbuilder fetches, and the origin credentials bind to."""

import pytest

from envbuilder._http import HTTPFailure, check_url, is_loopback, origin


@pytest.mark.parametrize("host,yes", [("localhost", True), ("127.0.0.5", True), ("[::1]", True),
                                      ("::1", True), ("10.0.0.1", False), ("example.com", False),
                                      ("127.example.com", False)])
def test_loopback_is_parsed_not_guessed(host, yes):
    assert is_loopback(host) is yes


def test_origin_spells_out_the_default_port():
    assert origin("https://Reg.Example/v2/x") == "https://reg.example:443"
    assert origin("http://localhost:5000/v2/") == "http://localhost:5000"
    assert origin("https://[::1]/x") == "https://[::1]:443"


@pytest.mark.parametrize("url,match", [
    ("ftp://x/y", "not an http"), ("https:///nohost", "names no host"),
    ("https://x:99999/", "bad port"), ("https://x/a b", "not a URL"),
    ("http://registry.example/v2/", "plain HTTP"),
])
def test_urls_envbuilder_does_not_fetch_are_refused_with_one_line(url, match):
    with pytest.raises(HTTPFailure, match=match) as ei:
        check_url(url, "the realm")
    assert ei.value.exit_code == 1 and "\n" not in str(ei.value)


def test_plain_http_to_loopback_or_when_the_user_gave_it():
    assert check_url("http://127.0.0.1:5000/v2/", "x") == "http://127.0.0.1:5000/v2/"
    assert check_url("http://mirror.example/v2/", "x", plain_http=True)
