"""examples/train_gpt.py, as a user runs it: the loss falls, a run resumed
from a checkpoint continues bit-identically (every later training and
evaluation loss equal), and the plot is a PNG."""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "examples", "train_gpt.py")
COMMON = ["--steps", "30", "--warmup", "5", "--eval-every", "10", "--checkpoint-every", "15",
          "--threads", "1", "--quiet"]


def train(out, *extra):
    subprocess.run([sys.executable, SCRIPT, "--out", str(out), *COMMON, *extra], check=True)
    with open(os.path.join(out, "history.json")) as f:
        return json.load(f)


def test_loss_falls_resume_is_bit_identical_and_plot_is_png(tmp_path):
    full = train(tmp_path / "full")
    losses = [loss for _, loss in full["train"]]
    assert len(losses) == 30
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 1.0, losses
    assert [step for step, _ in full["eval"]] == [10, 20, 30]

    resumed = train(tmp_path / "resumed", "--resume", str(tmp_path / "full" / "checkpoint_15"))
    # The resumed run's history starts from the checkpoint's and goes on:
    # float equality, not a tolerance, is the claim.
    assert resumed == full

    with open(tmp_path / "full" / "loss.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_resume_refuses_a_checkpoint_it_did_not_write(tmp_path):
    result = subprocess.run(
        [sys.executable, SCRIPT, "--out", str(tmp_path), *COMMON,
         "--resume", os.path.join(REPO, "testdata", "gpt_tiny", "checkpoint")],
        capture_output=True, text=True)
    assert result.returncode != 0
    assert "was not written by this script" in result.stderr
