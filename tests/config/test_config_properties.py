"""The one `.properties` reader: what broker, storage (meta.properties) and tools read."""

from __future__ import annotations

import pytest

from odradek.config import ConfigError, load_properties, parse_override, parse_properties
from odradek.storage.checkpoint import read_meta_properties, write_meta_properties


def test_java_syntax():
    text = ("# comment\n! bang\nkey = value\nspaced\tvalue\ncolon:v\n"
            "list=a,\\\n    b\nesc=caf\\u00e9\\t!\n")
    assert parse_properties(text) == {"key": "value", "spaced": "value", "colon": "v",
                                      "list": "a,b", "esc": "café\t!"}


def test_repeated_key_last_wins_and_trailing_space_is_kept():
    assert parse_properties("a=1\na=2 ") == {"a": "2 "}


def test_malformed_unicode_escape():
    with pytest.raises(ConfigError, match="Malformed"):
        parse_properties("a=\\u12")


def test_load_properties_reads_utf8_then_latin1(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text("client.id=café\n", encoding="utf-8")
    assert load_properties(path) == {"client.id": "café"}
    path.write_bytes("client.id=caf\xe9\n".encode("latin-1"))
    assert load_properties(path) == {"client.id": "café"}


def test_load_properties_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_properties(tmp_path / "missing.properties")
    with pytest.raises(ConfigError, match="is a directory"):
        load_properties(tmp_path)


def test_parse_override():
    assert parse_override("a=b=c") == ("a", "b=c")
    with pytest.raises(ConfigError, match="expected property=value"):
        parse_override("novalue")


def test_meta_properties_are_read_with_the_shared_reader(tmp_path):
    written = write_meta_properties(tmp_path, "cluster-1", 3)
    assert read_meta_properties(tmp_path) == written
    assert parse_properties((tmp_path / "meta.properties").read_text()) == written
