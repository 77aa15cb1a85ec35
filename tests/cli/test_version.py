"""``kwire --version``: the version, and one more line when the compiled record walk is not built."""

from __future__ import annotations

import pytest

from kwire import __version__
from kwire.cli.main import main
from kwire.protocol.records import walk


def _version(capsys) -> list[str]:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    return capsys.readouterr().out.splitlines()


def test_with_the_accelerator_built_the_version_alone(capsys) -> None:
    assert walk.accelerated(), "kwire.protocol.records._layout was not built (needs gcc and Python's headers)"
    assert _version(capsys) == [f"kwire {__version__}"]


def test_without_it_a_line_says_so(capsys, monkeypatch) -> None:
    monkeypatch.setattr(walk, "_layout", None)
    first, second = _version(capsys)
    assert first == f"kwire {__version__}"
    assert "record walk: pure Python" in second and "_layout is not built" in second
