"""The CUDA backend's check on a GPU machine (scripts/gpu-check.sh runs it).

Within a total time budget (default 450 s, so that it ends in under 8
minutes), with python3's standard library and NumPy (PyTorch only if
installed):

1. the device (nvidia-smi) and the CUDA unit tests, where a build tree or
   bundle has them (gmopt-cuda-tests, else the build's per-file tests); the
   test CudaDeviceTest.BenchGraphsHaveCudaKernels reads the bench graphs
   this check resolved ($GMOPT_BENCH_MODELS);
2. for the GPT-2-small and ResNet-50 bench models at real batch sizes (then
   the CNN testdata graphs cnn, cnn_bn, resnet_tiny), each model's baseline
   once (the original fp32 graph, eager, stream-ordered allocation from a
   dedicated pool; run beside the default pipeline) and the optimized runs
   (default pipeline; selective recompute; recompute + bf16 amp): the
   planned and counted peaks next to the device's own figures (baseline:
   the pool's used and reserved high-water marks; optimized: arena +
   persistent + workspace; both cross-checked against the fall in
   cudaMemGetInfo's free bytes), the reductions, median step times, the
   default pipeline's gradient agreement with the baseline, and per
   pipeline the gradients' agreement with the CPU at a small batch, and
   with `--cuda-graph` on against off (cuda_graph.py: three steps without
   updates, the last replayed from the captured graph; on --backend cpu the
   --cuda-graph run must be refused);
3. where PyTorch with CUDA is installed, the same models in PyTorch eager
   and with torch.utils.checkpoint + autocast(bf16): max_memory_allocated,
   max_memory_reserved, median step time; without PyTorch the part says
   "skipped: torch not installed".

Every figure printed is measured in this run; nothing is estimated.

Gradients against the CPU: the CPU backend runs the pipeline's graph at the
small batch for one step and writes its gradients with `gmopt-run
--dump-gradients` (one NumPy .npy file per trainable parameter and a
manifest.json with the loss); the checked backend does the same from the
same seeded weights and data, and gradients.compare_dumps compares them per
tensor as max|got - ref| / max|ref|. Tolerance per dtype: fp32 pipelines
--fp32-rtol (default 1e-3; the default pipeline's gradients against the
baseline too), bf16 amp --amp-rtol (default 1e-1).

Fails (exit 1, with a list of what failed at the end) when a unit test
fails (or, on a GPU machine, a device test skips); a bench model is missing
(unless --skip-missing-models); a run fails, times out or names an op
without a CUDA kernel ("no CUDA kernel for 'OP'"); a run's device figures
disagree with its accounting (device_memory.agrees false); a gradient
difference exceeds its tolerance (the CPU's, the baseline's, or the
uncaptured run's for --cuda-graph; on --backend cpu, --cuda-graph is not
refused); a PyTorch measurement fails; or a row is
left out because the budget ran out (unless --quick or --allow-partial).
Usage errors exit 2.

`python3 -m gpucheck --help` (with scripts/ on PYTHONPATH) lists the
options; --backend cpu checks the plumbing on a machine without a GPU (tiny
batches; the "device" runs are then CPU runs, labelled so, and have no
device figures). The PYTHON environment variable names the interpreter with
PyTorch (default: python3). GPU_CHECK_INJECT_GRAD_MISMATCH=1 (for testing
the check only) makes the CPU references with another seed, so every
gradient check must fail.

Modules: cli (options, the order of the check), plan (the models, batch
sizes and pipelines), budget (the time budget), device (nvidia-smi, CUDA
library folders), bench_graphs (resolving the graphs), unit_tests (running
and reading the GoogleTest executables), gmopt (running gmopt-run, the
rows), gradients (reading and comparing gradient dumps), cuda_graph (the
--cuda-graph comparison and its table), report (the tables, the failure
list, the summary), torch_models and torch_bench (the
PyTorch comparison, run as its own process with the caller's library
path).
"""
