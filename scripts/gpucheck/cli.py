"""The check's command line and the order of its parts (see
gpucheck/__init__.py for what it checks and when it fails)."""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import List, Optional

from gpucheck import bench_graphs, cuda_graph, device, gradients, plan, report, unit_tests
from gpucheck.budget import Budget
from gpucheck.gmopt import Row, run_logged, status_word

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Per-run caps (seconds) within the budget.
MEASURED_RUN_CAP = 200
GRADIENT_RUN_CAP = 150


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive finite number")
    return value


def whole_seconds(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number of seconds")
    return int(text)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-check.sh",
        description="The CUDA backend's check on a GPU machine, within a time budget "
                    "(see scripts/gpucheck/__init__.py).",
        epilog="PYTHON names the interpreter with PyTorch (default: python3). "
               "GPU_CHECK_INJECT_GRAD_MISMATCH=1 (for testing the check only) makes the CPU "
               "references with another seed, so every gradient check must fail. "
               "Exit status: 0 passed, 1 failed (the list at the end), 2 usage error.")
    parser.add_argument("--tools", help="folder with gmopt-run (default: build/tools, else "
                        "dist/gmopt-bundle/bin from scripts/bundle.sh)")
    parser.add_argument("--tests", help="folder with the unit test binaries (default: build/tests, "
                        "else dist/gmopt-bundle/tests from bundle.sh --with-tests)")
    parser.add_argument("--models", default=os.path.join(ROOT, "bench", "models"),
                        help="bench models, <name>/training_model.onnx or .onnx.gz (default: "
                        "bench/models; scripts/gpu-payload.sh puts gzipped graphs in .gpu/models)")
    parser.add_argument("--out", default="gpu-check-out",
                        help="reports, logs and summary.txt (default: gpu-check-out)")
    parser.add_argument("--scratch", help="unpacked graphs and the gradient dumps (default: a "
                        "temporary folder, removed at the end)")
    parser.add_argument("--backend", choices=["cuda", "cpu"], default="cuda",
                        help="cpu checks the plumbing on a machine without a GPU (tiny batches; "
                        "the 'device' runs are CPU runs, labelled so, without device figures)")
    parser.add_argument("--budget", type=whole_seconds, default=450,
                        help="total seconds (default 450), checked before every run; a run is "
                        "also cut at what is left")
    parser.add_argument("--quick", action="store_true",
                        help="the default pipeline only; rows left out for time do not fail")
    parser.add_argument("--allow-partial", action="store_true",
                        help="rows left out for time do not fail")
    parser.add_argument("--skip-missing-models", action="store_true",
                        help="a missing bench model is reported, not a failure")
    parser.add_argument("--fp32-rtol", type=positive_float, default=1e-3,
                        help="gradient tolerance of the fp32 pipelines (default 1e-3)")
    parser.add_argument("--amp-rtol", type=positive_float, default=1e-1,
                        help="gradient tolerance of bf16 amp (default 1e-1)")
    parser.add_argument("--tests-timeout", type=whole_seconds, default=180,
                        help="seconds per unit test executable (default 180)")
    return parser


@dataclass
class Context:
    """What every part of the check reads."""

    options: argparse.Namespace
    root: str
    run: str
    tests: str
    out: str
    scratch: str
    budget: Budget
    failures: report.Failures
    partial_ok: bool
    gmopt_env: dict
    rows: List[Row]

    def record(self, row: Row) -> None:
        self.rows.append(row)
        with open(os.path.join(self.out, "rows.tsv"), "a") as f:
            f.write(row.tsv())


def default_tools(root: str) -> str:
    if os.access(os.path.join(root, "build", "tools", "gmopt-run"), os.X_OK):
        return os.path.join(root, "build", "tools")
    return os.path.join(root, "dist", "gmopt-bundle", "bin")


def default_tests(root: str) -> str:
    build = os.path.join(root, "build", "tests")
    if any(os.access(os.path.join(build, name), os.X_OK)
           for name in ("gmopt-cuda-tests", "CudaDeviceTest")):
        return build
    return os.path.join(root, "dist", "gmopt-bundle", "tests")


def check_device(ctx: Context) -> bool:
    """Prints the device facts; True when nvidia-smi lists a GPU."""
    print("== device", flush=True)
    facts = device.probe_nvidia_smi()
    for line in facts.lines:
        print(line)
    if facts.note:
        print(facts.note)
    return facts.gpu_present


def resolve_graphs(ctx: Context, configs) -> dict:
    """folder -> resolved graph path, for the models found."""
    print("== bench graphs", flush=True)
    found = {}
    for config in configs:
        graph = bench_graphs.resolve(config, ctx.root, ctx.options.models, ctx.scratch)
        if graph.path:
            found[config.folder] = graph.path
            print(f"{config.folder}: {graph.source}")
        elif ctx.options.skip_missing_models:
            print(f"{config.folder}: missing ({graph.source}[.gz]): skipped (--skip-missing-models)")
        else:
            print(f"{config.folder}: MISSING ({graph.source}[.gz]; bench/models/build.py {config.folder})")
            ctx.failures.add(f"model {config.folder}: missing {graph.source}[.gz] (make it with "
                             f"bench/models/build.py {config.folder}, or pass --skip-missing-models)")
    return found


def run_unit_tests(ctx: Context, gpu_present: bool) -> None:
    print("== CUDA unit tests", flush=True)
    names = unit_tests.find_executables(ctx.tests)
    if not names:
        print(f"no CUDA unit tests in {ctx.tests} (skipped)")
        return
    # The tests read testdata/ from this checkout, the bench graphs from
    # the scratch folder's models/.
    env = dict(ctx.gmopt_env, GMOPT_SOURCE_DIR=ctx.root,
               GMOPT_BENCH_MODELS=os.path.join(ctx.scratch, "models"))
    for name in names:
        limit = int(min(ctx.budget.remaining(), ctx.options.tests_timeout))
        if limit < 10:
            print(f"{name}: left out (time budget)")
            if not ctx.partial_ok:
                ctx.failures.add(f"unit tests {name}: left out, the time budget ran out")
            continue
        log = os.path.join(ctx.out, f"{name}.log")
        outcome = run_logged([os.path.join(ctx.tests, name)], log, limit, env)
        with open(log, errors="replace") as f:
            summary = unit_tests.read_gtest_log(f.read())
        line, failure = unit_tests.verdict(name, outcome.status, summary, limit, log,
                                           ctx.options.backend == "cuda" and gpu_present)
        print(line, flush=True)
        if failure:
            ctx.failures.add(failure)


def gmopt_command(ctx: Context, model: str, dims, backend: str, passes: str, extra: List[str]):
    return ([ctx.run, model] + plan.dim_flags(dims)
            + [f"--backend={backend}", f"--passes={passes}", "--optimizer=none", "--quiet"] + extra)


def measured_run(ctx: Context, config, pipeline, model: str) -> None:
    """The model's measured run with `pipeline` (with the baseline beside the
    default pipeline)."""
    tag = f"{config.key}_{pipeline.key}"
    report_path = os.path.join(ctx.out, f"{tag}.json")
    if os.path.exists(report_path):
        os.remove(report_path)
    baseline = pipeline.name == "default"
    command = gmopt_command(ctx, model, config.dims, ctx.options.backend, pipeline.passes,
                            ["--steps", str(plan.measured_steps(ctx.options.backend))]
                            + (["--baseline"] if baseline else [])
                            + ["--report-json", report_path])
    outcome = run_logged(command, os.path.join(ctx.out, f"{tag}.log"),
                         ctx.budget.run_limit(MEASURED_RUN_CAP), ctx.gmopt_env)
    ctx.record(Row("with-baseline" if baseline else "run", config.label, pipeline.name,
                   status_word(outcome, report_path), report_path, outcome.log, outcome.limit))


def gradient_check(ctx: Context, config, pipeline, model: str, reference_seed: int) -> None:
    """The gradients of one step at the small batch on the checked backend
    against the CPU's, from the same seeded weights and data (the CPU's
    with `reference_seed`)."""
    tag = f"{config.key}_{pipeline.key}"
    dumps = os.path.join(ctx.scratch, "gradients", tag)
    shutil.rmtree(dumps, ignore_errors=True)
    os.makedirs(dumps)
    rtol = plan.gradient_rtol(pipeline.dtype, ctx.options.fp32_rtol, ctx.options.amp_rtol)
    comparison_path = os.path.join(ctx.out, f"{tag}_gradients.json")
    if os.path.exists(comparison_path):
        os.remove(comparison_path)

    def row(status, log, limit=None, reason=""):
        return Row("grad", config.label, pipeline.name, status, comparison_path, log, limit, reason)

    cpu_dump = os.path.join(dumps, "cpu-reference")
    cpu = run_logged(gmopt_command(ctx, model, config.small_dims, "cpu", pipeline.passes,
                                   ["--steps", "1", "--seed", str(reference_seed),
                                    "--dump-gradients", cpu_dump]),
                     os.path.join(ctx.out, f"{tag}_cpu_reference.log"),
                     ctx.budget.run_limit(GRADIENT_RUN_CAP), ctx.gmopt_env)
    if cpu.status != 0:
        # No reference: the check is not run; say why.
        ctx.record(row(status_word(cpu, None), cpu.log, cpu.limit))
        return
    checked_dump = os.path.join(dumps, "checked")
    checked_report = os.path.join(ctx.out, f"{tag}_grad_run.json")
    checked = run_logged(gmopt_command(ctx, model, config.small_dims, ctx.options.backend,
                                       pipeline.passes,
                                       ["--steps", "1", "--seed", "0", "--dump-gradients",
                                        checked_dump, "--report-json", checked_report]),
                         os.path.join(ctx.out, f"{tag}_grad.log"),
                         ctx.budget.run_limit(GRADIENT_RUN_CAP), ctx.gmopt_env)
    status = status_word(checked, checked_report)
    if status not in ("ok", "error"):
        ctx.record(row(status, checked.log, checked.limit))
        return
    try:
        agreement = gradients.compare_dumps(gradients.read_dump(checked_dump),
                                            gradients.read_dump(cpu_dump), rtol)
    except gradients.DumpError as e:
        ctx.record(row("failed", checked.log, checked.limit, f"unreadable gradient dump: {e}"))
        return
    with open(comparison_path, "w") as f:
        json.dump(agreement.to_json(), f, indent=1)
    # "error": the run reported, then failed (its device memory disagreed):
    # the comparison stands, the error fails the check too.
    ctx.record(row(status, checked.log, checked.limit))
    shutil.rmtree(dumps, ignore_errors=True)


def cuda_graph_check(ctx: Context, config, pipeline, model: str) -> None:
    """The small batch with --cuda-graph against the same run uncaptured
    (gpucheck/cuda_graph.py); on the CPU backend, that --cuda-graph is
    refused."""
    tag = f"{config.key}_{pipeline.key}_cuda_graph"
    dumps = os.path.join(ctx.scratch, "gradients", tag)
    shutil.rmtree(dumps, ignore_errors=True)
    os.makedirs(dumps)
    comparison_path = os.path.join(ctx.out, f"{tag}.json")
    if os.path.exists(comparison_path):
        os.remove(comparison_path)
    rtol = plan.gradient_rtol(pipeline.dtype, ctx.options.fp32_rtol, ctx.options.amp_rtol)

    def row(status, log, limit=None, reason=""):
        return Row("graph", config.label, pipeline.name, status, comparison_path, log, limit, reason)

    def run(mode: str, extra: List[str]):
        report_path = os.path.join(ctx.out, f"{tag}_{mode}_run.json")
        if os.path.exists(report_path):
            os.remove(report_path)
        outcome = run_logged(gmopt_command(ctx, model, config.small_dims, ctx.options.backend,
                                           pipeline.passes,
                                           ["--steps", str(cuda_graph.STEPS), "--seed", "0",
                                            "--dump-gradients", os.path.join(dumps, mode),
                                            "--report-json", report_path] + extra),
                             os.path.join(ctx.out, f"{tag}_{mode}.log"),
                             ctx.budget.run_limit(GRADIENT_RUN_CAP), ctx.gmopt_env)
        return outcome, report_path

    on, on_report = run("on", ["--cuda-graph"])
    if ctx.options.backend != "cuda":
        with open(on.log, errors="replace") as f:
            text = f.read()
        if on.status == 1 and cuda_graph.refused(text):
            with open(comparison_path, "w") as f:
                json.dump(cuda_graph.refusal_json(cuda_graph.REFUSAL), f, indent=1)
            ctx.record(row("ok", on.log, on.limit))
        else:
            ctx.record(row("failed", on.log, on.limit,
                           f"--cuda-graph on {ctx.options.backend} was not refused with "
                           f"'{cuda_graph.REFUSAL}' (exit {on.status})"))
        return
    on_status = status_word(on, on_report)
    if on_status not in ("ok", "error"):
        ctx.record(row(on_status, on.log, on.limit))
        return
    off, off_report = run("off", [])
    off_status = status_word(off, off_report)
    if off_status not in ("ok", "error"):
        ctx.record(row(off_status, off.log, off.limit))
        return
    try:
        agreement = gradients.compare_dumps(gradients.read_dump(os.path.join(dumps, "on")),
                                            gradients.read_dump(os.path.join(dumps, "off")), rtol)
    except gradients.DumpError as e:
        ctx.record(row("failed", on.log, on.limit, f"unreadable gradient dump: {e}"))
        return
    reports = []
    for path in (off_report, on_report):
        try:
            with open(path) as f:
                reports.append(json.load(f))
        except (OSError, ValueError):
            reports.append(None)
    with open(comparison_path, "w") as f:
        json.dump(cuda_graph.comparison_json(agreement.to_json(), *reports), f, indent=1)
    # "error": a run reported, then failed (its device memory disagreed).
    status = "error" if "error" in (on_status, off_status) else "ok"
    ctx.record(row(status, on.log if on_status == "error" else off.log, on.limit))
    shutil.rmtree(dumps, ignore_errors=True)


def run_models(ctx: Context, configs, pipelines, graphs: dict) -> None:
    print(f"== gmopt on {ctx.options.backend}", flush=True)
    reference_seed = 0
    if os.environ.get("GPU_CHECK_INJECT_GRAD_MISMATCH", "0") == "1":
        reference_seed = 1
        print("GPU_CHECK_INJECT_GRAD_MISMATCH=1: the CPU references use seed 1 "
              "(every gradient check must fail)")
    for config in configs:
        model = graphs.get(config.folder)
        if not model:
            continue
        for pipeline in pipelines:
            print(f"{config.label} {pipeline.name}: {ctx.budget.elapsed():.0f} s into the budget",
                  flush=True)
            measured_run(ctx, config, pipeline, model)
            gradient_check(ctx, config, pipeline, model, reference_seed)
            cuda_graph_check(ctx, config, pipeline, model)


def run_pytorch(ctx: Context, caller_env: dict) -> None:
    """PyTorch on the same models, in its own process (the interpreter
    $PYTHON, the caller's library path), cut at what the budget leaves."""
    print("\n== PyTorch on the same models", flush=True)
    limit = max(1, int(ctx.budget.remaining()) - 2)
    scripts = os.path.join(ctx.root, "scripts")
    env = dict(caller_env)
    env["PYTHONPATH"] = scripts + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    command = [os.environ.get("PYTHON", "python3"), "-u", "-m", "gpucheck.torch_bench",
               "--root", ctx.root, "--backend", ctx.options.backend,
               "--deadline", str(time.time() + ctx.budget.remaining()),
               "--failures", ctx.failures.path]
    command += ["--quick"] if ctx.options.quick else []
    command += ["--partial-ok"] if ctx.partial_ok else []
    # The process appends its failures to the file: they are read back after.
    before = len(ctx.failures)
    try:
        status = subprocess.run(command, env=env, timeout=limit).returncode
    except subprocess.TimeoutExpired:
        status = "timeout"
    except OSError as e:
        status = f"cannot start {command[0]}: {e}"
    with open(ctx.failures.path) as f:
        written = [line.rstrip("\n") for line in f]
    ctx.failures.items += written[before:]
    if status == "timeout":
        print(f"PyTorch: cut after {limit} s, at the end of the time budget: the rows not shown "
              "were left out")
        if not ctx.partial_ok:
            ctx.failures.add(f"pytorch: cut after {limit} s at the end of the time budget (rows left out)")
    elif status != 0:
        ctx.failures.add(f"the PyTorch comparison ended with exit {status}")


def main(argv: Optional[List[str]] = None) -> int:
    options = make_parser().parse_args(argv)
    budget = Budget(options.budget)
    root = ROOT
    tools = options.tools or default_tools(root)
    run = os.path.join(tools, "gmopt-run")
    if not os.access(run, os.X_OK):
        print(f"gpu-check.sh: error: no gmopt-run in {tools} (build it, or pass --tools)",
              file=sys.stderr)
        return 1
    out = os.path.abspath(options.out)
    os.makedirs(out, exist_ok=True)
    temporary = options.scratch is None
    scratch = tempfile.mkdtemp(prefix="gpu-check.") if temporary else os.path.abspath(options.scratch)
    os.makedirs(scratch, exist_ok=True)
    for name in ("rows.tsv", "failures.txt"):
        open(os.path.join(out, name), "w").close()
    caller_env = dict(os.environ)
    cuda_dirs = device.cuda_library_dirs(root)
    ctx = Context(options=options, root=root, run=run, tests=options.tests or default_tests(root),
                  out=out, scratch=scratch, budget=budget,
                  failures=report.Failures(os.path.join(out, "failures.txt")),
                  partial_ok=options.quick or options.allow_partial,
                  gmopt_env=device.with_library_dirs(caller_env, cuda_dirs), rows=[])
    try:
        gpu_present = check_device(ctx)
        print(f"budget: {options.budget} s; CUDA library folders: {cuda_dirs or 'none found'}")
        configs = plan.model_configs(options.backend)
        pipelines = plan.pipelines(options.quick)
        graphs = resolve_graphs(ctx, configs)
        run_unit_tests(ctx, gpu_present)
        run_models(ctx, configs, pipelines, graphs)

        report.settle_rows(ctx.rows, ctx.partial_ok, ctx.failures)
        print()
        print("\n".join(report.memory_table(ctx.rows, options.backend, ctx.failures)))
        print()
        rtols = {p.name: plan.gradient_rtol(p.dtype, options.fp32_rtol, options.amp_rtol)
                 for p in pipelines}
        print("\n".join(report.steps_table(ctx.rows, options.backend, rtols, ctx.failures)))
        print()
        print("\n".join(cuda_graph.graph_table(ctx.rows, options.backend, rtols, ctx.failures)))
        run_pytorch(ctx, caller_env)
    finally:
        if temporary:
            shutil.rmtree(scratch, ignore_errors=True)
    lines = report.summary_lines(ctx.failures, budget.elapsed(), options.budget, out)
    print("\n".join(lines))
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return 1 if ctx.failures else 0
