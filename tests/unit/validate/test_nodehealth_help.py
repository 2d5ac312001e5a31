"""`python -m lab.validate.nodehealth --help` says what the program is in a whole sentence (it printed the
docstring's first line only: "... the node side of gpulab's health in Slurm, run by slurmd as")."""

import pytest

from lab.validate import nodehealth


def test_help_describes_the_program_in_a_whole_sentence(capsys):
    with pytest.raises(SystemExit) as done:
        nodehealth.main(["--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "run by slurmd as ``HealthCheckProgram`` (and, with ``--prolog``, as a prolog)." in text
