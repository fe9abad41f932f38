"""gpucheck's small parts: the plan, the budget, the command line, the
GoogleTest logs, the bench graphs and the PyTorch model definitions."""
import gzip
import os

import pytest

from gpucheck import bench_graphs, cli, plan, torch_models, unit_tests
from gpucheck.budget import Budget

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_budget_starts_runs_only_with_time_left_and_cuts_them():
    clock = FakeClock()
    budget = Budget(100, clock)
    assert budget.run_limit(200) == 95
    assert budget.run_limit(30) == 30
    clock.now += 70
    assert budget.run_limit(200) == 25 and budget.elapsed() == 70
    clock.now += 11
    assert budget.run_limit(200) is None


def test_plan_rows_and_pipelines():
    cuda = plan.model_configs("cuda")
    assert [c.folder for c in cuda] == ["gpt2_small", "resnet50", "testdata/cnn", "testdata/cnn_bn",
                                        "testdata/resnet_tiny"]
    assert cuda[0].dims == ("batch=8", "seq=1024", "batch_x_seq=8192")
    assert [c.label for c in plan.model_configs("cpu")] == ["gpt2_small b1xs32", "resnet50 b2", "cnn b8"]
    assert plan.model_configs("cpu")[2].key == "testdata_cnn"
    assert [p.name for p in plan.pipelines(quick=True)] == ["default"]
    full = plan.pipelines(quick=False)
    assert [p.key for p in full] == ["default", "recompute", "recompute_amp"]
    assert plan.gradient_rtol(full[2].dtype, 1e-3, 0.1) == 0.1
    assert plan.gradient_rtol(full[1].dtype, 1e-3, 0.1) == 1e-3
    assert plan.dim_flags(("batch=2", "seq=4")) == ["--dim", "batch=2", "--dim", "seq=4"]


def test_command_line_keeps_every_option():
    options = cli.make_parser().parse_args([
        "--tools", "t", "--tests", "u", "--models", "m", "--out", "o", "--scratch", "s",
        "--backend", "cpu", "--budget", "60", "--quick", "--allow-partial", "--skip-missing-models",
        "--fp32-rtol", "1e-4", "--amp-rtol", "0.2", "--tests-timeout", "30"])
    assert (options.tools, options.tests, options.models, options.out, options.scratch) == \
        ("t", "u", "m", "o", "s")
    assert options.backend == "cpu" and options.budget == 60 and options.tests_timeout == 30
    assert options.quick and options.allow_partial and options.skip_missing_models
    assert options.fp32_rtol == 1e-4 and options.amp_rtol == 0.2
    defaults = cli.make_parser().parse_args([])
    assert (defaults.backend, defaults.budget, defaults.fp32_rtol, defaults.amp_rtol) == \
        ("cuda", 450, 1e-3, 1e-1)


@pytest.mark.parametrize("argv", [["--backend", "rocm"], ["--budget", "1.5"], ["--fp32-rtol", "-1"],
                                  ["--amp-rtol", "nan"], ["--tests-timeout", "x"], ["--bogus"],
                                  ["--tools"]])
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.make_parser().parse_args(argv)
    assert exit_info.value.code == 2
    assert "gpu-check.sh: error:" in capsys.readouterr().err


GTEST_LOG = """\
[ RUN      ] CudaDeviceTest.Runs
needs a CUDA device (no CUDA-capable device is detected)
[  SKIPPED ] CudaDeviceTest.Runs (0 ms)
[ RUN      ] CudaDeviceTest.Host
[       OK ] CudaDeviceTest.Host (1 ms)
[ RUN      ] CudaDeviceTest.Bad
[  FAILED  ] CudaDeviceTest.Bad (2 ms)
[  SKIPPED ] 1 test, listed below:
[  SKIPPED ] CudaDeviceTest.Runs
[  FAILED  ] 1 test, listed below:
[  FAILED  ] CudaDeviceTest.Bad
"""


def test_gtest_log_counts_and_device_skips():
    summary = unit_tests.read_gtest_log(GTEST_LOG)
    assert (summary.passed, summary.skipped, summary.failed) == (1, 1, ["CudaDeviceTest.Bad"])
    assert summary.device_skip_text() == "1 needs a CUDA device (no CUDA-capable device is detected)"


def test_gtest_verdicts():
    summary = unit_tests.read_gtest_log(GTEST_LOG)
    line, failure = unit_tests.verdict("T", 1, summary, 60, "T.log", False)
    assert failure == "unit tests T: exit 1: CudaDeviceTest.Bad"
    line, failure = unit_tests.verdict("T", 0, summary, 60, "T.log", True)
    assert failure.startswith("unit tests T: device tests skipped although a GPU is present: 1 needs")
    line, failure = unit_tests.verdict("T", 0, summary, 60, "T.log", False)
    assert failure is None and line == "T: passed (1 passed, 1 skipped)"
    line, failure = unit_tests.verdict("T", "timeout", summary, 60, "T.log", False)
    assert failure == "unit tests T: timed out after 60 s"


def test_test_executables_bundle_first(tmp_path):
    for name in ("CudaDeviceTest", "NcclGpuTest", "OtherTest"):
        path = tmp_path / name
        path.write_text("")
        path.chmod(0o755)
    assert unit_tests.find_executables(str(tmp_path)) == ["CudaDeviceTest", "NcclGpuTest"]
    (tmp_path / "gmopt-cuda-tests").write_text("")
    (tmp_path / "gmopt-cuda-tests").chmod(0o755)
    assert unit_tests.find_executables(str(tmp_path)) == ["gmopt-cuda-tests"]


def test_bench_graphs_link_unpack_or_go_missing(tmp_path):
    models, scratch = tmp_path / "models", tmp_path / "scratch"
    (models / "packed").mkdir(parents=True)
    with gzip.open(models / "packed" / "training_model.onnx.gz", "wb") as f:
        f.write(b"graph bytes")
    packed = bench_graphs.resolve(plan.ModelConfig("p", "packed", (), ()), ROOT, str(models), str(scratch))
    with open(packed.path, "rb") as f:
        assert f.read() == b"graph bytes"
    testdata = bench_graphs.resolve(plan.ModelConfig("c", "testdata/cnn", (), ()), ROOT, str(models),
                                    str(scratch))
    assert os.path.islink(testdata.path)
    assert os.path.samefile(testdata.path, os.path.join(ROOT, "testdata", "cnn", "training_model.onnx"))
    absent = bench_graphs.resolve(plan.ModelConfig("a", "absent", (), ()), ROOT, str(models), str(scratch))
    assert absent.path is None and absent.source.endswith("absent/training_model.onnx")


def test_torch_model_definitions_are_complete_without_torch():
    # Every name the extracted GPT-2 and ResNet-50 code uses is defined by
    # the extraction or provided (torch, nn, F, math).
    assert torch_models.unresolved_names(ROOT) == []
    sources = torch_models.extracted_sources(ROOT)
    assert "class GPTTiny" in sources[os.path.join("testdata", "generate.py")]
    assert "import onnx" not in "".join(sources.values())


def test_torch_model_extraction_finds_what_is_missing():
    source = "import onnx\nA = 1\nB, C = 2, A\n\n@decorate\nclass D(Base):\n    x = A\n"
    extracted = torch_models.extract(source, ["B", "D"], "f.py")
    assert extracted.startswith("B, C = 2, A") and "@decorate" in extracted
    assert "import onnx" not in extracted
    assert torch_models.free_globals(extracted) == {"A", "Base", "decorate"}
    with pytest.raises(torch_models.ExtractionError, match="no top-level definition of E"):
        torch_models.extract(source, ["E"], "f.py")
