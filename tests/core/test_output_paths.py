"""Output files: replaced whole (atomic_output), checked writable before any work
(check_output_file)."""

from pathlib import Path

import pytest

from npusim.core.errors import OutputError
from npusim.core.output_paths import atomic_output, check_output_file

pytestmark = pytest.mark.unit


def test_a_file_is_replaced_whole_or_not_at_all(tmp_path):
    target = tmp_path / "report.md"
    target.write_text("old\n")
    with atomic_output(target, "the report") as handle:
        handle.write("new\n")
        assert target.read_text() == "old\n"  # readers see the old file until the end
    assert target.read_text() == "new\n"
    with pytest.raises(RuntimeError):
        with atomic_output(target, "the report") as handle:
            handle.write("half")
            raise RuntimeError("interrupted")
    assert target.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]  # no staging file left


def test_a_write_that_fails_names_the_path_and_keeps_the_old_file(tmp_path):
    target = tmp_path / "results.parquet"
    target.write_bytes(b"old")
    with pytest.raises(OutputError, match=r"results.parquet: cannot write the sweep results "
                                          r"\(.*\); keep going"):
        with atomic_output(target, "the sweep results", binary=True, hint="; keep going") as handle:
            handle.write(b"new")
            raise OSError(28, "No space left on device")
    assert target.read_bytes() == b"old" and len(list(tmp_path.iterdir())) == 1


def test_a_link_keeps_pointing_at_its_target_and_a_device_is_written_in_place(tmp_path):
    target = tmp_path / "target.md"
    target.write_text("old\n")
    link = tmp_path / "link.md"
    link.symlink_to(target)
    with atomic_output(link, "the report") as handle:
        handle.write("new\n")
    assert link.is_symlink() and target.read_text() == "new\n"
    with atomic_output("/dev/null", "the report") as handle:  # not replaced by a file
        handle.write("gone\n")
    assert Path("/dev/null").is_char_device()
    if Path("/dev/full").is_char_device():  # Linux: every write fails with ENOSPC
        with pytest.raises(OutputError, match="/dev/full: cannot write the report"):
            with atomic_output("/dev/full", "the report") as handle:
                handle.write("x" * 100_000)
        assert Path("/dev/full").is_char_device()


@pytest.mark.skipif(not Path("/sys").is_dir(), reason="needs Linux's /sys")
def test_a_new_file_where_none_can_be_created_is_refused_before_any_work(tmp_path):
    # root passes os.access for /sys, so `validate --report /sys/r.md` ran every case
    # and only then failed to write its report
    with pytest.raises(OutputError, match=r"^--report /sys/r\.md: cannot create a file "
                                          r"in /sys"):
        check_output_file("/sys/r.md", "--report")
    with pytest.raises(OutputError, match=r"^--csv /sys/new/c\.csv: /sys/new: cannot create"):
        check_output_file("/sys/new/c.csv", "--csv")
    # a writable place passes and is left as it was: no probe file, no directory made
    assert check_output_file(tmp_path / "r.md", "--report") == tmp_path / "r.md"
    assert check_output_file(tmp_path / "a" / "b" / "r.md", "--report")
    assert list(tmp_path.iterdir()) == []
