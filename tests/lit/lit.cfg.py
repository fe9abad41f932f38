# lit configuration for gmopt's golden tests (after MLIR's standalone example).
import os
import sys
import lit.formats

config.name = "gmopt"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".gmir", ".test"]
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.gmopt_obj_root, "tests", "lit")

config.environment["PATH"] = os.pathsep.join(
    [config.gmopt_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")])
config.substitutions.append(("%testdata", os.path.join(config.gmopt_src_root, "testdata")))
# Bench graphs some tests share with bench/ (bench/recompute/*.gmir).
config.substitutions.append(("%bench", os.path.join(config.gmopt_src_root, "bench")))
config.substitutions.append(("%scripts", os.path.join(config.gmopt_src_root, "scripts")))
config.substitutions.append(("%gmopt_build", config.gmopt_obj_root))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
# The interpreter lit runs under, for small JSON checks in RUN lines.
config.substitutions.append(("%python", sys.executable))

# Data-parallel runs: the `mpi` feature when gmopt was built with MPI and
# mpirun is on PATH (tests that need it are UNSUPPORTED, with the reason,
# otherwise); %mpirun runs as root too, on fewer cores than ranks.
import shutil
if getattr(config, "gmopt_have_mpi", "OFF") == "ON" and shutil.which("mpirun"):
    config.available_features.add("mpi")
else:
    lit_config.note("no MPI build or no mpirun: data-parallel run tests are skipped")
mpirun = "mpirun --oversubscribe"
if hasattr(os, "geteuid") and os.geteuid() == 0:
    mpirun += " --allow-run-as-root"
config.substitutions.append(("%mpirun", mpirun))

# scripts/bundle.sh's test: the `bundle` feature where its programs are
# present and the build is not instrumented (sanitized tools are several
# times larger than the bundle's 40 MiB allows, and need the sanitizer
# runtime the bundle does not carry).
def is_on(value):
    return str(value).upper() in ("ON", "1", "TRUE", "YES")
if (not is_on(getattr(config, "gmopt_sanitize", "OFF"))
        and not is_on(getattr(config, "gmopt_fuzz", "OFF"))
        and all(shutil.which(p) for p in ("patchelf", "strip", "ldd", "tar", "xz"))):
    config.available_features.add("bundle")
else:
    lit_config.note("sanitized build or no patchelf/strip/ldd/tar/xz: the bundle test is skipped")
