#!/usr/bin/env bash
# ctest's consumer_install: installs the regular build into a prefix inside
# it, builds tests/consumer/ out of tree against the installed CMake package,
# runs it on a testdata graph, checks its figures against the installed
# gmopt-compile's report, and builds and runs the same program again with
# only `pkg-config --cflags --libs gmopt`, which must print the same.
# Usage: run-consumer-test.sh BUILD_DIR SOURCE_DIR PYTHON BUILD_TYPE CXX C \
#          LAUNCHER LINKER_FLAGS CXX_FLAGS
set -euo pipefail
build=$1 src=$2 python=$3 buildType=$4 cxx=$5 cc=$6 launcher=$7 ldflags=$8 cxxflags=$9
work="$build/tests/consumer-install"
prefix="$work/prefix"
model="$src/testdata/gpt_tiny/training_model.onnx"
rm -rf "$work"
mkdir -p "$work"

echo "-- cmake --install into $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"

# build_against_prefix SOURCE BUILD NAME: configures and builds the project
# in SOURCE against the installed package, with this build's toolchain;
# logs go to $work/NAME-configure.log and $work/NAME-build.log.
build_against_prefix() {
  cmake -S "$1" -B "$2" -G Ninja \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE="$buildType" \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" \
    -DCMAKE_EXE_LINKER_FLAGS="$ldflags" \
    "-DCMAKE_CXX_FLAGS_${buildType^^}=$cxxflags" >"$work/$3-configure.log"
  cmake --build "$2" >"$work/$3-build.log"
}

echo "-- configure and build tests/consumer against it"
build_against_prefix "$src/tests/consumer" "$work/cmake-build" consumer
"$work/cmake-build/gmopt-consumer" "$model" >"$work/consumer.out"
tail -n 20 "$work/consumer.out" | cut -c1-160
echo "-- README's walkthrough program"
"$work/cmake-build/walkthrough" "$model" >"$work/walkthrough.out"
cat "$work/walkthrough.out"
grep -q "planned peak" "$work/walkthrough.out" ||
  { echo "error: the walkthrough printed no planned peak"; exit 1; }

echo "-- training from code (gmopt::runtime): ONNX Runtime's losses"
"$work/cmake-build/train" "$src/testdata/gpt_tiny" 3 >"$work/train.out"
cat "$work/train.out"
"$python" - "$work/train.out" "$src/testdata/gpt_tiny/adamw_losses.json" <<'PY'
import json, sys
got = [float(line) for line in open(sys.argv[1]) if line.strip()]
want = json.load(open(sys.argv[2]))["losses"][:len(got)]
bad = [(g, w) for g, w in zip(got, want) if abs(g - w) > 1e-5 * abs(w)]
if len(got) != 3 or bad:
    sys.exit("error: the trained losses %s are not ONNX Runtime's %s" % (got, want))
PY

echo "-- examples/cpp/train_gpt: the loss falls, a resumed run is bit-identical"
build_against_prefix "$src/examples/cpp" "$work/example-build" example
example=(--repo "$src" --steps 30 --warmup 5 --eval-every 10 --checkpoint-every 15 --threads 1 --quiet)
"$work/example-build/train_gpt" --out "$work/gpt-full" "${example[@]}"
"$work/example-build/train_gpt" --out "$work/gpt-resumed" "${example[@]}" \
  --resume "$work/gpt-full/checkpoint_15" >/dev/null
cmp "$work/gpt-full/history.csv" "$work/gpt-resumed/history.csv" ||
  { echo "error: the resumed run's losses differ from the uninterrupted run's"; exit 1; }
"$python" - "$work/gpt-full/history.csv" <<'PY'
import sys
train = [float(line.split(",")[2]) for line in open(sys.argv[1]) if line.startswith("train,")]
if len(train) != 30 or not sum(train[-5:]) / 5 < sum(train[:5]) / 5 - 1.0:
    sys.exit("error: the example's loss did not fall: %s" % train)
PY

echo "-- the installed gmopt-compile, same passes without count-ops"
"$prefix/bin/gmopt-compile" "$model" --dim batch=4,batch_x_seq=256 \
  --optimizer=none --passes=canonicalize,schedule,plan-buffers \
  -o "$work/reference.gm" --report-json "$work/reference.json" >/dev/null

echo "-- pkg-config"
pcflags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs gmopt)
echo "pkg-config --cflags --libs gmopt: $pcflags" | cut -c1-200
case " $pcflags " in
  *" -I$prefix/include/gmopt "*) ;;
  *) echo "error: pkg-config gives no -I$prefix/include/gmopt"; exit 1 ;;
esac
# shellcheck disable=SC2086 # the flags are words
$launcher "$cxx" -std=c++17 $cxxflags $ldflags "$src/tests/consumer/main.cpp" \
  $pcflags -o "$work/gmopt-consumer-pc"
"$work/gmopt-consumer-pc" "$model" >"$work/consumer-pc.out"
cmp "$work/consumer.out" "$work/consumer-pc.out"

"$python" - "$work/consumer.out" "$work/reference.json" <<'PY'
import json, sys
consumer = json.loads(open(sys.argv[1]).read().splitlines()[-1])
reference = json.load(open(sys.argv[2]))
stats = consumer["pass_statistics"]["count-ops"]
perOp = {k: v for k, v in stats.items() if k not in ("nodes", "op-types")}
checks = [
    ("count-ops ran in the pipeline", ",count-ops," in consumer["pipeline"], True),
    ("count-ops nodes == gmopt-compile's nodes", stats["nodes"], reference["nodes"]),
    ("nodes by op add up", sum(perOp.values()), stats["nodes"]),
    ("op-types == ops counted", stats["op-types"], len(perOp)),
    ("MatMul nodes counted", perOp.get("MatMul", 0) > 0, True),
]
for key in ("planned_bytes", "arena_bytes", "lower_bound_bytes",
            "persistent_bytes", "workspace_bytes", "eager_baseline_bytes"):
    checks.append((key + " == gmopt-compile's", consumer["memory"][key],
                   reference[key]))
failed = 0
for what, got, want in checks:
    ok = got == want
    failed += not ok
    print(("ok   " if ok else "FAIL ") + what + ": " + str(got) +
          ("" if ok else " (expected " + str(want) + ")"))
print("consumer: planned peak %d B, arena %d B, eager baseline %d B" %
      (consumer["memory"]["planned_bytes"], consumer["memory"]["arena_bytes"],
       consumer["memory"]["eager_baseline_bytes"]))
sys.exit(1 if failed else 0)
PY
echo "consumer_install: passed"
