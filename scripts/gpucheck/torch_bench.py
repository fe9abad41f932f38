"""PyTorch on the bench models: max_memory_allocated, max_memory_reserved
and the median step time of PyTorch eager, and of torch.utils.checkpoint
per block + autocast(bf16) (on the CPU: checkpoint only, as bf16 autocast
takes a minute a step there).

Run as its own process by the check (`python -m gpucheck.torch_bench`),
with the interpreter that has PyTorch ($PYTHON) and the caller's library
path, and cut at what the budget leaves. Without PyTorch it says
"skipped: torch not installed" and exits 0; failures are appended to the
--failures file, one line each.
"""
import argparse
import sys
import time

from gpucheck import torch_models


def variants(big: bool, quick: bool):
    """(name, checkpoint, autocast) of each measured variant."""
    if quick:
        return [("eager", False, False)]
    return [("eager", False, False), ("ckpt+autocast", True, True) if big else ("ckpt", True, False)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="gpucheck.torch_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="the gmopt checkout")
    parser.add_argument("--backend", choices=["cuda", "cpu"], required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--deadline", type=float, required=True, help="time.time() to end by")
    parser.add_argument("--failures", required=True, help="file the failures are appended to")
    parser.add_argument("--partial-ok", action="store_true", help="rows left out for time do not fail")
    args = parser.parse_args(argv)

    def fail(message):
        with open(args.failures, "a") as f:
            f.write(message + "\n")

    try:
        import torch
    except ImportError:
        print("PyTorch: skipped: torch not installed")
        return 0
    if args.backend == "cuda" and not torch.cuda.is_available():
        print(f"PyTorch: skipped: PyTorch {torch.__version__} has no CUDA device")
        return 0
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint
    try:
        models = torch_models.load(args.root)
    except Exception as e:  # noqa: BLE001 (any failure of the extracted code)
        print(f"PyTorch: cannot load the model definitions: {e}")
        fail(f"pytorch: cannot load the model definitions: {e}")
        return 0
    device = torch.device(args.backend)
    big = args.backend == "cuda"

    def gpt():
        size = dict(models["GPT2_SMALL"])
        model = models["GPTTiny"](0.1, size).to(device)
        b, s = (8, 1024) if big else (1, 32)
        ids = torch.randint(0, size["vocab"], (b, s), device=device)
        return model, ids, ids.reshape(-1), "gpt2_small", f"b{b}xs{s}"

    def resnet():
        model = models["ResNet50"]().to(device)
        b = 64 if big else 2
        x = torch.randn(b, 3, 224, 224, device=device)
        y = torch.randint(0, 1000, (b,), device=device)
        return model, x, y, "resnet50", f"b{b}"

    def step(model, x, y, ckpt, amp):
        blocks = getattr(model, "h", None)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            if ckpt and blocks is not None:
                # GPTTiny.forward with each block checkpointed.
                _, length = x.size()
                pos = torch.arange(0, length, dtype=torch.long, device=x.device)
                h = model.drop(model.wte(x) + model.wpe(pos))
                for block in blocks:
                    h = checkpoint(block, h, use_reentrant=False)
                logits = F.linear(model.ln_f(h), model.wte.weight).view(-1, model.vocab)
            elif ckpt:
                # ResNet50.forward with each bottleneck checkpointed.
                h = F.max_pool2d(F.relu(model.bn1(model.conv1(x))), 3, stride=2, padding=1)
                for block in model.stages:
                    h = checkpoint(block, h, use_reentrant=False)
                logits = model.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))
            else:
                logits = model(x)
            loss = F.cross_entropy(logits.float(), y)
        loss.backward()

    def measure(make, ckpt, amp):
        model, x, y, name, shape = make()
        model.train()
        try:
            step(model, x, y, ckpt, amp)  # warm-up
            times = []
            if big:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            for _ in range(3 if big else 1):
                for p in model.parameters():
                    p.grad = None
                if big:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    step(model, x, y, ckpt, amp)
                    end.record()
                    torch.cuda.synchronize()
                    times.append(start.elapsed_time(end))
                else:
                    t = time.perf_counter()
                    step(model, x, y, ckpt, amp)
                    times.append(1e3 * (time.perf_counter() - t))
            times.sort()
            alloc = torch.cuda.max_memory_allocated() / 2**20 if big else float("nan")
            reserved = torch.cuda.max_memory_reserved() / 2**20 if big else float("nan")
            return name, shape, alloc, reserved, times[len(times) // 2]
        except Exception as e:  # noqa: BLE001 (out of memory included)
            return name, shape, None, None, str(e).splitlines()[0]
        finally:
            del model
            if big:
                torch.cuda.empty_cache()

    print(f"figures measured by PyTorch {torch.__version__} on {args.backend} in this run"
          + ("" if big else " (no CUDA: step times only)"))
    print(f"{'model':20} {'variant':14} {'max_alloc MiB':>13} {'max_reserved MiB':>16} {'step ms':>8}")
    sys.stdout.flush()
    for make, model_name in ((gpt, "gpt2_small"), (resnet, "resnet50")):
        for vname, ckpt, amp in variants(big, args.quick):
            if args.deadline - time.time() < 20:
                print(f"{model_name:20} {vname:14} left out: the time budget ran out")
                if not args.partial_ok:
                    fail(f"pytorch {model_name} {vname}: left out, the time budget ran out")
                continue
            name, shape, alloc, reserved, ms = measure(make, ckpt, amp)
            label = f"{name} {shape}"
            if alloc is None:
                print(f"{label:20} {vname:14} FAILED: {ms}")
                fail(f"pytorch {label} {vname}: {ms}")
            else:
                print(f"{label:20} {vname:14} {alloc:>13.1f} {reserved:>16.1f} {ms:>8.2f}")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
