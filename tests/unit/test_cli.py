import pytest

from scheduler import __version__
from scheduler.cli import main


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    assert capsys.readouterr().out.startswith(f"gang-scheduler {__version__} ")


def test_help_lists_the_version_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    assert "version" in capsys.readouterr().out


def test_unknown_command_is_a_usage_error_that_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["schedule-everything"])
    assert exit_.value.code == 2
    assert "schedule-everything" in capsys.readouterr().err
