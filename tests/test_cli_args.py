"""The command line takes ``key=value`` overrides before or after the options; anything else unknown is refused."""

import json

import pytest

from rl.cli.main import parse_args


def test_overrides_after_the_options_join_those_before_them():
    args = parse_args(["bench", "peer", "arith_tiny", "eval.every=0", "--seeds", "0", "train.lr=1e-3", "--steps", "2"])
    assert args.overrides == ["eval.every=0", "train.lr=1e-3"] and args.seeds == "0" and args.steps == 2
    assert parse_args(["train", "arith_tiny", "--verbose", "train.max_steps=3"]).overrides == ["train.max_steps=3"]


def test_an_unknown_option_or_word_is_still_refused(capsys):
    for argv in (["bench", "peer", "arith_tiny", "--sedes", "0"], ["bench", "peer", "arith_tiny", "--seeds", "0", "x"]):
        with pytest.raises(SystemExit) as stop:
            parse_args(argv)
        assert stop.value.code == 2
    assert "rl bench peer: unrecognized arguments: x; rl bench peer -h lists the options" in capsys.readouterr().err


def test_an_unknown_option_is_said_by_the_command_that_lists_its_options(capsys):
    with pytest.raises(SystemExit):
        parse_args(["eval", "builtin:arith-tiny", "--num-problems", "3"])
    said = "rl eval: unrecognized arguments: --num-problems 3; rl eval -h lists the options\n"
    assert capsys.readouterr().err == said


def test_a_run_the_driver_stops_is_one_line_and_exit_code_1(tmp_path, monkeypatch, capsys):
    from rl.cli.main import main
    from rl.loop.driver import Driver, RunFailed

    why = "reward 'judge' failed on all of the last 4 groups"

    async def stopped(self):
        self.cfg.run_dir.mkdir(parents=True, exist_ok=True)  # as a real run has by then
        raise RunFailed(
            why, {"failure": why, "stopped_by": None, "steps": 1, "reward_failures": {"raised": 4, "nan": 8}}
        )

    monkeypatch.setattr(Driver, "run", stopped)
    argv = ["train", "arith_tiny", f"output_dir={tmp_path}", "name=r", "train.max_steps=1", "data.arith.num_train=20"]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert (
        err.strip().splitlines()[-1]
        == f"run stopped: {why}; no checkpoint was written, so a run of the same command starts afresh"
    )
    assert not any("Traceback" in line for line in err.splitlines())
    assert (
        "note: reward calls that raised 4, non-finite reward values 8" in out and "held-out accuracy" not in out
    )  # the counts, not an accuracy
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["failure"] == why


def test_the_resume_hint_quotes_a_run_folder_a_shell_would_split(tmp_path):
    from rl.cli.main import _continue_from

    run_dir = tmp_path / "my runs" / "try 1"
    assert _continue_from(run_dir) == "no checkpoint was written, so a run of the same command starts afresh"
    (run_dir / "checkpoints" / "step_000002").mkdir(parents=True)
    assert _continue_from(run_dir) == f"continue with: rl train --resume '{run_dir}'"
    plain = tmp_path / "plain"
    (plain / "checkpoints" / "step_000002").mkdir(parents=True)
    assert _continue_from(plain) == f"continue with: rl train --resume {plain}"  # as it was: nothing to quote
