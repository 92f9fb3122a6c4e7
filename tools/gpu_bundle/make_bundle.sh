#!/usr/bin/env bash
# Builds every GPU test and benchmark binary with -c opt into gpu-bundle/ (git-ignored, < 64 MiB), with
# run.sh, the runner for the GPU machine. Called by `tools/tandem gpu-bundle` (Bazel flags as arguments).
# The binaries link Tandem's libraries dynamically (--dynamic_mode=fully), so the kernels' device code is
# carried once in gpu-bundle/_solib_k8 instead of once per binary.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
OUT="$ROOT/gpu-bundle"
LIMIT=$((64 * 1024 * 1024))
MODE=(-c opt --dynamic_mode=fully --strip=always)

# Every binary that needs a GPU: the one test binary, and every benchmark.
TARGETS=(//tests:gpu_tests)
while read -r t; do TARGETS+=("$t"); done < <(bazel query 'kind("cc_binary", //bench/...)' 2>/dev/null)

bazel build "$@" "${MODE[@]}" "${TARGETS[@]}"
BIN="$(bazel info "$@" "${MODE[@]}" bazel-bin 2>/dev/null)"

rm -rf "$OUT"
mkdir -p "$OUT/lib"
for t in "${TARGETS[@]}"; do
  pkg="${t#//}"; pkg="${pkg%%:*}"; name="${t##*:}"
  mkdir -p "$OUT/$pkg"
  cp "$BIN/$pkg/$name" "$OUT/$pkg/$name"
  chmod u+w "$OUT/$pkg/$name"
  # Tandem's own shared libraries, at the same place relative to the binary (its RUNPATH is $ORIGIN-relative).
  ldd "$BIN/$pkg/$name" | awk '/_solib_k8/ {print $3}' | while read -r lib; do
    rel="${lib#"$BIN"/}"
    [ -e "$OUT/$rel" ] || { mkdir -p "$OUT/$(dirname "$rel")"; cp -L "$lib" "$OUT/$rel"; }
  done
  # System libraries from Debian that a GPU machine's image may lack (CUDA's own come from PyTorch there).
  ldd "$BIN/$pkg/$name" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libbenchmark*|libjpeg*|libpng*) [ -e "$OUT/lib/$(basename "$lib")" ] || cp -L "$lib" "$OUT/lib/" ;;
    esac
  done
done
chmod -R u+w "$OUT"
cp "$ROOT/tools/gpu_bundle/run.sh" "$OUT/run.sh"
mkdir -p "$OUT/tests/data"
cp "$ROOT"/tests/data/*.safetensors "$OUT/tests/data/" 2>/dev/null || true
if compgen -G "$ROOT/bench/torch/*.py" >/dev/null; then
  mkdir -p "$OUT/torch"
  cp "$ROOT"/bench/torch/*.py "$OUT/torch/"
fi
size=$(du -sb "$OUT" | cut -f1)
echo "gpu-bundle: $(du -sh "$OUT" | cut -f1) in $OUT (limit 64 MiB)"
find "$OUT" -type f -perm -u+x -not -name '*.so*' | sed "s|$OUT/|  |"
if [ "$size" -ge "$LIMIT" ]; then
  echo "gpu-bundle is $size bytes, over the 64 MiB limit" >&2
  exit 1
fi
