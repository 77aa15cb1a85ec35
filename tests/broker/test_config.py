"""BrokerConfig loading: every setting is checked against its type and named when wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from kwire.broker.config import ConfigError, load_config


@pytest.mark.parametrize("setting,message", [
    ({"advertised_port": "x"}, "advertised_port must be an integer"),
    ({"port": True}, "port must be an integer"),
    ({"auto_create_topics": 1}, "auto_create_topics must be true or false"),
    ({"advertised_host": 5}, "advertised_host must be a string"),
    ({"data_dir": 3}, "data_dir must be a path string"),
    ({"nope": 1}, "unknown setting 'nope'"),
    ({"log": {"segment_bytes": 1}}, "segment_bytes"),
    ({"page_cache_bytes": 0}, "page_cache_bytes must be -1"),
    ({"log": {"retention": 1}}, "unknown log setting 'retention'"),
])
def test_wrong_settings_are_named(setting, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, **setting)


def test_file_then_overrides(tmp_path):
    f = tmp_path / "b.toml"
    f.write_text('port = 1234\ndata_dir = "here"\nadvertised_host = "kafka.local"\n[log]\nretention_ms = 5\n')
    cfg = load_config(f, port=4321, advertised_port=None)
    assert (cfg.port, cfg.data_dir, cfg.log.retention_ms) == (4321, Path("here"), 5)
    assert cfg.advertised == ("kafka.local", 4321)
