"""The `memrl` command: `memrl sft`'s flags map onto SFTConfig and bad ones are refused naming what is wrong;
`memrl train` runs the registered examples by name."""

import subprocess
import sys

import pytest

from memrl.cli import config_from_args, examples, main
from memrl.cli import sft_parser as parser


def test_command_line_maps_onto_the_config(tiny_checkpoint, tmp_path):
    args = parser().parse_args(["--env", "memrl/Echo-v0", "--workflow", "last_observation", "--model",
                                str(tiny_checkpoint), "--out", str(tmp_path), "--steps", "7", "--lr", "0.01",
                                "--env-config", '{"num_turns": 3}', "--task-options", '[{"num_turns": 2}]',
                                "--eval-every", "5", "--num-eval-tasks", "9", "--seed", "4", "--probe-rows",
                                "--lr-schedule", "cosine", "--lr-warmup-steps", "2"])
    config = config_from_args(args)
    assert config.environment_cfg.env_config == {"num_turns": 3}
    assert config.learners_cfg.model_path == str(tiny_checkpoint.absolute())
    train = config.training_cfg
    assert (train.steps, train.steps_per_iteration, train.task_options) == (7, 5, [{"num_turns": 2}])
    assert config.evaluation_cfg.evaluation_num_tasks == 9 and config.debugging_cfg.seed == 4
    # A decaying schedule reaches its floor at the run's last step.
    optimizer = train.optimizer
    assert (optimizer.lr, optimizer.lr_schedule, optimizer.lr_warmup_steps, optimizer.lr_decay_steps) == \
        (0.01, "cosine", 2, 7)
    assert train.probe_rows and not config_from_args(parser().parse_args(
        ["--model", str(tiny_checkpoint), "--out", str(tmp_path)])).training_cfg.probe_rows


def test_bad_flags_are_refused(tiny_checkpoint, tmp_path, capsys):
    with pytest.raises(SystemExit):
        parser().parse_args(["--model", str(tiny_checkpoint), "--out", str(tmp_path), "--env-config", "[3]"])
    assert "must be a JSON object" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser().parse_args(["--out", str(tmp_path)])  # --model is required
    with pytest.raises(ValueError, match="training.batch_size=0 is not allowed"):
        config_from_args(parser().parse_args(["--model", str(tiny_checkpoint), "--out", str(tmp_path),
                                              "--batch-size", "0"]))


def test_every_tuned_example_script_is_registered_and_loads():
    from pathlib import Path

    # The examples, the warm-start recipes and the analyses.
    scripts = {p.stem for p in (Path(__file__).parents[1] / "tuned_examples").rglob("*.py")
               if "\ndef main(" in p.read_text()}
    found = examples()
    assert scripts and scripts <= set(found)
    for name in scripts:
        assert callable(found[name].load())


def test_eval_runs_a_benchmark_by_name_with_its_own_flags(capsys):
    evaluations = examples("memrl.evaluations")
    assert set(evaluations) == {"longmemeval", "locomo", "memoryagentbench"}
    assert all(callable(entry.load()) for entry in evaluations.values())
    with pytest.raises(SystemExit) as exit_:
        main(["eval", "locomo", "--help"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("usage: memrl eval locomo")
    with pytest.raises(SystemExit) as exit_:
        main(["eval", "babilong"])
    assert exit_.value.code == 2 and "no evaluation named 'babilong'" in capsys.readouterr().err


def test_train_runs_an_example_by_name_with_its_own_flags():
    # Through the installed `memrl` command: the example parses its own flags (here, its --help).
    proc = subprocess.run([sys.executable, "-m", "memrl", "train", "echo_dapo", "--help"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage: memrl train echo_dapo") and "--num-gpus" in proc.stdout


def test_unknown_commands_and_examples_are_named(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "no_such_example"])
    assert exit_.value.code == 2 and "no example named 'no_such_example'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["fit"])
    assert exit_.value.code == 2 and "no command 'fit'; the commands: train, eval, sft" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["train"])
    assert exit_.value.code == 2 and "memalpha_grpo" in capsys.readouterr().err
