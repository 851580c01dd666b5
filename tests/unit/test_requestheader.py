"""The identity a front proxy vouches for, read from its headers as kube's requestheader authenticator reads them."""

from __future__ import annotations

from apiserver.auth.authn import UserInfo
from apiserver.auth.delegated import RequestHeaderConfig

CONFIG = RequestHeaderConfig(username_headers=["X-Remote-User", "X-Alt-User"],
                             group_headers=["X-Remote-Group", "X-Alt-Group"],
                             extra_prefixes=["X-Remote-Extra-", "X-Alt-Extra-"])


def identity(*headers: tuple[str, str]) -> UserInfo | None:
    return CONFIG.identity([(name.encode(), value.encode()) for name, value in headers])


def test_the_first_username_header_in_configured_order_with_a_value_names_the_user() -> None:
    assert identity(("X-Alt-User", "bob"), ("X-Remote-User", "alice")).name == "alice"
    assert identity(("X-Remote-User", ""), ("X-Alt-User", "bob")).name == "bob"
    assert identity(("x-remote-user", "carol")).name == "carol"  # header names are case-insensitive


def test_without_a_username_there_is_no_identity() -> None:
    assert identity(("X-Remote-Group", "devs")) is None
    assert identity(("X-Remote-User", "")) is None


def test_groups_are_every_value_of_the_group_headers_in_configured_order() -> None:
    user = identity(("X-Alt-Group", "c"), ("X-Remote-Group", "a"), ("X-Remote-User", "u"), ("X-Remote-Group", "b"))
    assert user.groups == ("a", "b", "c")


def test_extra_keys_are_lower_cased_and_percent_decoded_and_keep_every_value() -> None:
    user = identity(("X-Remote-User", "u"), ("X-Remote-Extra-Scopes", "view"), ("X-Remote-Extra-Scopes", "edit"),
                    ("X-Alt-Extra-Example.com%2fTeam", "blue"))
    assert user.extra == {"scopes": ("view", "edit"), "example.com/team": ("blue",)}


def test_other_headers_say_nothing_about_the_user() -> None:
    user = identity(("X-Remote-User", "u"), ("Authorization", "Bearer x"), ("X-Remote-Groups", "not-a-group"),
                    ("Impersonate-User", "admin"))
    assert user == UserInfo("u", (), "", {})
